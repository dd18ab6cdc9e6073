//! Lambda tools (docs/sandbox.md, "Lambda tools") on a real bubblewrap: a python lambda saved
//! with `write ~/tools/<name>` runs in the code sandbox when called, with the agent's memory as
//! its workspace, a TypeScript one in a QuickJS realm with its types stripped; their value, what
//! they printed and the files they changed come back; failures say how they ended; an agent
//! without `execute` is refused; a model is offered both as tools of their own and calls them.
//! These tests fail (they do not skip) without bubblewrap: CI installs it.

use std::time::Duration;

use seed_agents_protocol::generated::{
    CreateAgent, GetSession, InvokeSessionToolResponse, InvokeSessionToolVerb, ListAgentTools, SessionEventPayload,
    SetModelProvider,
};
use seed_agents_protocol::{AgentId, SessionId};
use seed_agents_server::ExecBackend;
use serde_json::{Value as Json, json};

use crate::support::fixtures::{invoke, tool_output as output};
use crate::support::provider::{Provider, Script};
use crate::support::{TestServer, User, custom_provider_config, definition, say};

async fn setup() -> (TestServer, User, AgentId, SessionId) {
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.exec_backend = ExecBackend::Namespaces;
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
    })
    .await;
    let user = server.user();
    let agent = user.create_agent("Lambdas").await;
    let session = user.create_session(&agent, None).await;
    (server, user, agent, session)
}

/// Saves a python lambda `name` with `source` and the given schemas.
async fn save(user: &User, session: &str, name: &str, source: &str, input: Json, output_schema: Option<Json>) {
    let mut document = json!({"description": format!("The {name} lambda."), "input": input, "source": source,
                              "runtime": "python"});
    if let Some(schema) = output_schema {
        document["output"] = schema;
    }
    let write = invoke(
        session,
        InvokeSessionToolVerb::Write,
        json!({"address": format!("~/tools/{name}"), "content": document.to_string()}),
    );
    output(&user.call(write).await.unwrap());
}

/// Saves a TypeScript lambda `name` with `source`.
async fn save_ts(user: &User, session: &str, name: &str, source: &str, input: Json) {
    let document = json!({"description": format!("The {name} lambda."), "input": input, "source": source,
                          "runtime": "typescript"});
    let write = invoke(
        session,
        InvokeSessionToolVerb::Write,
        json!({"address": format!("~/tools/{name}"), "content": document.to_string()}),
    );
    output(&user.call(write).await.unwrap());
}

async fn call(user: &User, session: &str, tool: &str, input: Json) -> InvokeSessionToolResponse {
    let call = invoke(session, InvokeSessionToolVerb::Call, json!({"tool": tool, "input": input}));
    user.call(call).await.unwrap()
}

#[tokio::test]
async fn lambdas_run_when_called_and_report_how_they_ended() {
    let (server, user, agent, session) = setup().await;
    let words = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    let source = "import os\n\
                  def main(input):\n    print('counting', len(input['text']), 'characters')\n    \
                  open('/workspace/counted.txt', 'w').write(input['text'])\n    \
                  return {'words': len(input['text'].split()), 'cwd': os.getcwd()}";
    save(&user, &session, "word_count", source, words.clone(), None).await;
    let listed = user.call(ListAgentTools { agent_id: agent.clone() }).await.unwrap().tools;
    let listed = listed.iter().find(|tool| tool.name == "word_count").unwrap();
    assert!(listed.granted, "a lambda is granted");

    let ran = output(&call(&user, &session, "word_count", json!({"text": "one two three"})).await);
    assert_eq!(ran["result"], json!({"words": 3, "cwd": "/workspace"}), "{ran}");
    assert_eq!(ran["logs"], "counting 13 characters", "{ran}");
    assert_eq!(ran["changedFiles"], json!([{"path": "counted.txt", "change": "added"}]), "{ran}");
    let summary = ran["summary"].as_str().unwrap();
    assert!(summary.starts_with("Ran word_count (") && summary.ends_with("ms, 1 memory file changed)."), "{summary}");
    let read = invoke(&session, InvokeSessionToolVerb::Read, json!({"address": "~/memory/counted.txt"}));
    assert!(serde_json::to_string(&output(&user.call(read).await.unwrap())).unwrap().contains("one two three"));

    // Input that does not fit is a contract result, not a run.
    let misfit = output(&call(&user, &session, "word_count", json!({})).await);
    assert!(misfit["contract"].as_str().unwrap().contains("> lambda tool"), "{misfit}");

    // An async main is awaited; a thrown error names the exit and the traceback's last lines.
    save(
        &user,
        &session,
        "later",
        "import asyncio\nasync def main(input):\n    await asyncio.sleep(0)\n    return 7",
        json!({"type": "object"}),
        None,
    )
    .await;
    assert_eq!(output(&call(&user, &session, "later", json!({})).await)["result"], 7);
    save(
        &user,
        &session,
        "broken",
        "def main(input):\n    print('about to fail')\n    raise ValueError('no luck')",
        json!({"type": "object"}),
        None,
    )
    .await;
    let broken = call(&user, &session, "broken", json!({})).await;
    let error = broken.error.unwrap();
    assert!(error.starts_with("Tool broken failed. The lambda exited with code 1:"), "{error}");
    assert!(error.ends_with("ValueError: no luck"), "{error}");
    save(&user, &session, "no_main", "x = 1", json!({"type": "object"}), None).await;
    let error = call(&user, &session, "no_main", json!({})).await.error.unwrap();
    assert!(error.contains("defines no main(input) function"), "{error}");
    // A result that does not fit the output schema is an error.
    let number = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    save(
        &user,
        &session,
        "misfit_out",
        "def main(input):\n    return {'n': 'not a number'}",
        json!({"type": "object"}),
        Some(number),
    )
    .await;
    let error = call(&user, &session, "misfit_out", json!({})).await.error.unwrap();
    assert!(error.contains("does not fit its output schema"), "{error}");
    // A TypeScript lambda runs too, its types stripped, in a realm with no file access; its
    // failures say what was thrown and what it printed.
    save_ts(&user, &session, "ts_add", "export default (input: { a: number; b: number }): number => {\n  console.log('adding');\n  return input.a + input.b;\n};", json!({"type": "object"})).await;
    let added = output(&call(&user, &session, "ts_add", json!({"a": 2, "b": 40})).await);
    assert_eq!((added["result"].clone(), added["logs"].clone()), (json!(42), json!("adding")), "{added}");
    assert!(added.get("changedFiles").is_none(), "{added}");
    save_ts(
        &user,
        &session,
        "ts_throw",
        "export function main(input: unknown) {\n  console.log('trying');\n  throw new Error('bad input');\n}",
        json!({"type": "object"}),
    )
    .await;
    let error = call(&user, &session, "ts_throw", json!({})).await.error.unwrap();
    assert!(error.starts_with("Tool ts_throw failed. bad input"), "{error}");
    assert!(error.ends_with("It printed:\ntrying"), "{error}");
    save_ts(&user, &session, "ts_broken", "export default (input: number => 1", json!({"type": "object"})).await;
    let error = call(&user, &session, "ts_broken", json!({})).await.error.unwrap();
    assert!(error.contains("does not parse"), "{error}");
    server.stop().await;
}

#[tokio::test]
async fn an_agent_without_execute_may_not_run_lambdas() {
    let (server, user, _, _) = setup().await;
    let mut narrow = definition("Reader");
    narrow.tools = Some(vec!["search".to_owned()]);
    let agent = user.call(CreateAgent { client_request_id: None, definition: narrow }).await.unwrap().agent_id;
    let session = user.create_session(&agent, None).await;
    save(&user, &session, "echo", "def main(input):\n    return input", json!({"type": "object"}), None).await;
    let refused = call(&user, &session, "echo", json!({})).await;
    assert!(refused.error.as_deref().unwrap().contains("lambdas run only for agents granted execute"), "{refused:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_model_is_offered_lambdas_in_both_runtimes_and_calls_them() {
    let provider = Provider::start().await;
    let (server, user, _, _) = setup().await;
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent =
        user.call(CreateAgent { client_request_id: None, definition: definition("Scout") }).await.unwrap().agent_id;
    let session = user.create_session(&agent, None).await;
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    save(&user, &session, "square", "def main(input):\n    return input['n'] ** 2", schema.clone(), None).await;
    save_ts(&user, &session, "cube", "export default ({ n }: { n: number }) => n ** 3;", schema.clone()).await;
    provider.push(Script::tool_call("s1", "square", r#"{"n":12}"#).and_tool_call("c1", "cube", r#"{"n":3}"#));
    provider.push(Script::text("144 and 27."));
    user.call(say(&session, "square twelve")).await.unwrap();

    let requests = provider.requests();
    let offered: Vec<&Json> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|tool| tool["function"]["name"] == "square")
        .collect();
    assert_eq!(offered.len(), 1, "the lambda is a tool of its own");
    assert_eq!(offered[0]["function"]["parameters"], schema);
    let tools = requests[0].body["tools"].as_array().unwrap();
    assert!(tools.iter().any(|tool| tool["function"]["name"] == "cube"), "the TypeScript lambda is offered too");
    let messages = requests[1].body["messages"].as_array().unwrap();
    let results: Vec<&str> = messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .filter_map(|message| message["content"].as_str())
        .collect();
    assert_eq!(results.len(), 2, "{messages:?}");
    assert!(results[0].contains("\"result\":144") && results[1].contains("\"result\":27"), "{results:?}");
    let events = user
        .call(GetSession { session_id: session.clone(), after_seq: None, before_seq: None, limit: None })
        .await
        .unwrap()
        .events;
    let result = events
        .into_iter()
        .find_map(|event| match event.event {
            SessionEventPayload::ToolResultEvent(result) if result.name == "square" => Some(result),
            _ => None,
        })
        .unwrap();
    assert_eq!(result.error, None);
    assert_eq!(serde_json::to_value(result.output.unwrap()).unwrap()["result"], 144);
    server.stop().await;
}
