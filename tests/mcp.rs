//! MCP servers: the four actions against a test MCP server on loopback (rmcp's server side,
//! Streamable HTTP and the legacy SSE transport), their tools projected into agents' `~/tools`,
//! model turns that call them (results, a tool error, a timeout), a user's `call`, secret headers,
//! the private-network refusal, and a delete cascading through agents and tool documents.

use std::time::Duration;

use seed_agents_protocol::generated::{
    AgentToolInfoKind, CreateAgent, DeleteMcpServer, GetAgent, GetSession, InvokeSessionTool, InvokeSessionToolVerb,
    ListAgentTools, ListMcpServers, McpServerConfig, McpServerStatusState, McpServerTransport, RefreshMcpServer,
    SessionEventPayload, SetMcpServer, SetModelProvider, SetSecret, UpdateAgent,
};
use seed_agents_protocol::{Bytes, Value, wire};
use seed_agents_server::testing::bus::{ChangeReason, Event};
use serde_json::{Value as Json, json};

use crate::support::db::read_db;
use crate::support::mcp::TestMcpServer;
use crate::support::provider::{Provider, Script};
use crate::support::{TestServer, User, api_error, custom_provider_config, definition, say};

/// A server that may reach loopback (the test MCP server is there), with a short call timeout.
async fn start(provider: &Provider) -> (TestServer, User) {
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), |config| {
        config.allow_private_network = true;
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(10);
        config.mcp_call_timeout = Duration::from_millis(500);
    })
    .await;
    let user = server.user();
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    (server, user)
}

fn config(url: &str) -> McpServerConfig {
    McpServerConfig::new(url)
}

fn set(name: &str, config: McpServerConfig) -> SetMcpServer {
    SetMcpServer { name: name.into(), config }
}

async fn create_agent(user: &User, name: &str, servers: &[&str]) -> seed_agents_protocol::AgentId {
    let mut definition = definition(name);
    definition.mcp_servers = Some(servers.iter().map(|server| (*server).to_owned()).collect());
    user.call(CreateAgent { client_request_id: None, definition }).await.unwrap().agent_id
}

async fn mcp_tools(user: &User, agent: &str) -> Vec<(String, String, String, bool)> {
    let tools = user.call(ListAgentTools { agent_id: agent.into() }).await.unwrap().tools;
    tools
        .into_iter()
        .filter(|tool| tool.kind == AgentToolInfoKind::Mcp)
        .map(|tool| (tool.name, tool.server.unwrap(), tool.remote_name.unwrap(), tool.granted))
        .collect()
}

/// Each durable tool result of the session: (tool name, output as JSON, error).
async fn results(user: &User, session_id: &str) -> Vec<(String, Json, Option<String>)> {
    let session = GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None };
    user.call(session)
        .await
        .unwrap()
        .events
        .into_iter()
        .filter_map(|event| match event.event {
            SessionEventPayload::ToolResultEvent(result) => Some((
                result.name,
                result.output.map(|output| serde_json::to_value(&output).unwrap()).unwrap_or(Json::Null),
                result.error,
            )),
            _ => None,
        })
        .collect()
}

fn tool_names(request: &crate::support::provider::Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn servers_are_discovered_over_both_transports_and_their_tools_run_in_model_turns() {
    let provider = Provider::start().await;
    let mcp = TestMcpServer::start().await;
    let (server, user) = start(&provider).await;
    let app = server.server.as_ref().unwrap().app().clone();

    // Streamable HTTP, found without naming a transport; the secret header is filled from a
    // secret the server owns.
    user.call(SetSecret {
        name: "mcp-tools-token".into(),
        value: Bytes::from(b"Bearer sekret-mcp-token".to_vec()),
        metadata: None,
    })
    .await
    .unwrap();
    let mut tools_config = config(&mcp.http_url());
    tools_config.headers = Some([("x-plain".to_owned(), "visible".to_owned())].into());
    tools_config.secret_refs = Some([("authorization".to_owned(), "mcp-tools-token".to_owned())].into());
    let agent = create_agent(&user, "Operator", &["tools"]).await;
    let mut bus = app.bus.subscribe();
    let saved = user.call(set("tools", tools_config)).await.unwrap().server;
    assert_eq!(saved.status.state, McpServerStatusState::Ok, "{:?}", saved.status);
    assert_eq!(saved.transport, McpServerTransport::Http);
    assert_eq!(
        (saved.header_names.clone(), saved.secret_header_names.clone()),
        (vec!["x-plain".to_owned()], vec!["authorization".to_owned()])
    );
    assert!(saved.has_secrets);
    let names: Vec<(&str, &str)> =
        saved.tools.iter().map(|tool| (tool.name.as_str(), tool.tool_name.as_str())).collect();
    assert_eq!(
        names,
        [
            ("echo", "tools__echo"),
            ("add", "tools__add"),
            ("fail", "tools__fail"),
            ("hang", "tools__hang"),
            ("pixel", "tools__pixel")
        ]
    );
    let secret_seen = mcp.headers().iter().any(|headers| {
        headers.get("authorization").is_some_and(|value| value == "Bearer sekret-mcp-token")
            && headers.get("x-plain").is_some_and(|value| value == "visible")
    });
    assert!(secret_seen, "the secret and plain headers reach the MCP server");
    let mut reasons = Vec::new();
    while let Ok(Ok(event)) = tokio::time::timeout(Duration::from_millis(200), bus.recv()).await {
        if let Event::AccountChange { reason, agent_id, .. } = &*event {
            reasons.push((*reason, agent_id.clone()));
        }
    }
    assert!(reasons.contains(&(ChangeReason::McpServersChanged, None)), "{reasons:?}");
    assert!(reasons.contains(&(ChangeReason::AgentToolsChanged, Some(agent.to_string()))), "{reasons:?}");

    // Projected into the granted agent's ~/tools, with stable CIDs.
    let projected = mcp_tools(&user, &agent).await;
    assert_eq!(projected.len(), 5);
    assert!(projected.contains(&("tools__add".to_owned(), "tools".to_owned(), "add".to_owned(), true)));
    let listed = user.call(ListAgentTools { agent_id: agent.clone() }).await.unwrap().tools;
    let add = listed.iter().find(|tool| tool.name == "tools__add").unwrap();
    assert!(add.cid.starts_with("bafyrei"));
    assert_eq!(add.summary, "Adds two numbers.");
    let add_input = serde_json::to_value(&add.input).unwrap();
    assert_eq!(add_input["required"], json!(["a", "b"]));
    assert!(add_input.get("$schema").is_none(), "{add_input}");

    // The legacy SSE transport: found by fallback when the URL speaks only SSE.
    let legacy = user.call(set("legacy", config(&mcp.sse_url()))).await.unwrap().server;
    assert_eq!(legacy.status.state, McpServerStatusState::Ok, "{:?}", legacy.status);
    assert_eq!(legacy.transport, McpServerTransport::Sse);
    assert_eq!(legacy.tools.len(), 5);
    let mut forced = config(&mcp.sse_url());
    forced.transport = Some(McpServerTransport::Http);
    let refused = user.call(set("forced", forced)).await.unwrap().server;
    assert_eq!(refused.status.state, McpServerStatusState::Error, "Streamable HTTP only: no fallback");
    let listed = user.call(ListMcpServers {}).await.unwrap().servers;
    let names: Vec<&str> = listed.iter().map(|server| server.name.as_str()).collect();
    assert_eq!(names, ["forced", "legacy", "tools"]);
    let mut agent_definition = user.call(GetAgent { agent_id: agent.clone() }).await.unwrap().agent.definition;
    agent_definition.mcp_servers = Some(vec!["tools".into(), "legacy".into()]);
    user.call(UpdateAgent { agent_id: agent.clone(), definition: agent_definition }).await.unwrap();
    assert_eq!(mcp_tools(&user, &agent).await.len(), 10, "both servers projected");

    // A model turn calls two tools (one over each transport), one that errors, one that hangs.
    let session_id = user.create_session(&agent, None).await;
    provider.push(
        Script::tool_call("m1", "tools__echo", r#"{"text":"hi"}"#)
            .and_tool_call("m2", "legacy__add", r#"{"a":2,"b":3}"#)
            .and_tool_call("m3", "tools__fail", "{}")
            .and_tool_call("m4", "tools__hang", "{}")
            .and_tool_call("m5", "tools__add", r#"{"a":"x"}"#),
    );
    provider.push(Script::text("Done."));
    user.call(say(&session_id, "use your tools")).await.unwrap();
    let offered = tool_names(&provider.requests()[0]);
    assert!(
        offered.contains(&"tools__echo".to_owned()) && offered.contains(&"legacy__pixel".to_owned()),
        "{offered:?}"
    );
    let done = results(&user, &session_id).await;
    assert_eq!(done.len(), 5, "{done:?}");
    let by_name = |name: &str| done.iter().find(|(tool, ..)| tool == name).unwrap().clone();
    let (_, echo, error) = by_name("tools__echo");
    assert_eq!((echo["text"].as_str(), error), (Some("echo: hi"), None));
    assert_eq!(echo["summary"], "Ran echo on MCP server tools.");
    let (_, add, _) = by_name("legacy__add");
    assert_eq!((add["text"].as_str(), &add["structuredContent"]), (Some("5"), &json!({"sum": 5})));
    let (_, _, failed) = by_name("tools__fail");
    assert_eq!(failed.as_deref(), Some("MCP tool fail of server tools reported an error: it broke"));
    let (_, _, hung) = by_name("tools__hang");
    assert_eq!(hung.as_deref(), Some("MCP tool hang of server tools did not answer within 0.5s"));
    let (_, _, misfit) = by_name("tools__add");
    assert!(misfit.unwrap().starts_with("Validation failed for tool \"tools__add\":"));
    // The model read every result, errors included, and the turn ended normally.
    let second = &provider.requests()[1].body["messages"];
    let contents: Vec<String> = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(contents.len(), 5);
    assert!(contents.iter().any(|content| content.contains("echo: hi")));
    assert!(contents.iter().any(|content| content.contains("it broke")));
    let calls: Vec<String> = mcp.calls().into_iter().map(|(name, _)| name).collect();
    assert!(calls.contains(&"echo".to_owned()) && calls.contains(&"add".to_owned()), "{calls:?}");
    assert!(!mcp.calls().iter().any(|(name, arguments)| name == "add" && arguments["a"] == "x"), "never sent");

    // A user's `call` takes the same path.
    let call = InvokeSessionTool {
        session_id: session_id.clone(),
        verb: InvokeSessionToolVerb::Call,
        input: Value(wire::json_to_ipld(&json!({"tool": "tools__pixel", "input": {}}))),
    };
    let answered = user.call(call).await.unwrap();
    assert_eq!(answered.error, None);
    let output = serde_json::to_value(answered.output.unwrap()).unwrap();
    assert_eq!(output["text"], "a pixel");
    assert_eq!(output["parts"][0]["type"], "image");
    server.stop().await;
}

#[tokio::test]
async fn a_server_down_at_save_is_kept_and_refreshed_and_delete_cascades() {
    let provider = Provider::start().await;
    let (server, user) = start(&provider).await;
    // Reserve a port, then let it go: nothing listens there at save time.
    let address = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{address}/mcp");
    user.call(SetSecret { name: "mcp-later-key".into(), value: Bytes::from(b"k1".to_vec()), metadata: None })
        .await
        .unwrap();
    user.call(SetSecret { name: "shared-key".into(), value: Bytes::from(b"k2".to_vec()), metadata: None })
        .await
        .unwrap();
    let mut later = config(&url);
    later.secret_refs = Some(
        [("x-key".to_owned(), "mcp-later-key".to_owned()), ("x-other".to_owned(), "shared-key".to_owned())].into(),
    );
    let agent = create_agent(&user, "Waiting", &["later"]).await;
    let other = create_agent(&user, "Other", &["later", "elsewhere"]).await;
    let saved = user.call(set("later", later)).await.unwrap().server;
    assert_eq!(saved.status.state, McpServerStatusState::Error);
    assert!(saved.status.error.is_some() && saved.status.checked_at.is_some());
    assert!(saved.tools.is_empty());
    assert!(mcp_tools(&user, &agent).await.is_empty());

    let mcp = TestMcpServer::start_on(address).await;
    let refreshed = user.call(RefreshMcpServer { name: "later".into() }).await.unwrap().server;
    assert_eq!(refreshed.status.state, McpServerStatusState::Ok, "{:?}", refreshed.status);
    assert_eq!((refreshed.id.clone(), refreshed.created_at), (saved.id.clone(), saved.created_at));
    assert_eq!(mcp_tools(&user, &agent).await.len(), 5);
    assert_eq!(mcp_tools(&user, &other).await.len(), 5);
    assert!(mcp.headers().iter().any(|headers| headers.get("x-key").is_some_and(|value| value == "k1")));
    assert_eq!(
        api_error(user.call(RefreshMcpServer { name: "nope".into() }).await),
        (404, "MCP server not found".into())
    );

    user.call(DeleteMcpServer { name: "later".into() }).await.unwrap();
    assert!(user.call(ListMcpServers {}).await.unwrap().servers.is_empty());
    assert!(mcp_tools(&user, &agent).await.is_empty());
    assert!(mcp_tools(&user, &other).await.is_empty());
    let granted = |agent: seed_agents_protocol::AgentId| {
        let user = &user;
        async move { user.call(GetAgent { agent_id: agent }).await.unwrap().agent.definition.mcp_servers }
    };
    assert_eq!(granted(agent.clone()).await, Some(vec![]));
    assert_eq!(granted(other.clone()).await, Some(vec!["elsewhere".to_owned()]));
    // The secret named for the server went with it; the shared one stays.
    assert_eq!(
        api_error(user.call(DeleteMcpServer { name: "later".into() }).await),
        (404, "MCP server not found".into())
    );
    let account = user.id.to_string();
    let mut names: Vec<String> = read_db(&server, move |conn| {
        conn.prepare("SELECT name FROM secrets WHERE account_id = ?1 ORDER BY name")?
            .query_map((account,), |row| row.get(0))?
            .collect()
    })
    .await;
    names.sort();
    assert_eq!(names, ["shared-key"]);
    server.stop().await;
}

#[tokio::test]
async fn configs_are_validated_and_private_addresses_refused_without_the_flag() {
    let server = TestServer::start().await;
    let user = server.user();
    fn refused<T: std::fmt::Debug>(result: Result<T, seed_agents_sdk::Error>) -> String {
        api_error(result).1
    }
    assert!(
        refused(user.call(set("Bad Name", config("https://example.com/mcp"))).await)
            .starts_with("Invalid MCP server name")
    );
    assert_eq!(
        refused(user.call(set("x", config("ftp://example.com"))).await),
        "MCP server URL must be an http(s) URL"
    );
    assert_eq!(
        refused(user.call(set("x", config("http://127.0.0.1:1/mcp"))).await),
        "MCP server URL is not allowed: 127.0.0.1 is a private or local network address"
    );
    assert_eq!(
        refused(user.call(set("x", config("http://[::1]:1/mcp"))).await),
        "MCP server URL is not allowed: ::1 is a private or local network address"
    );
    // A name resolving to loopback is saved, and its discovery refused by the guard.
    let named = user.call(set("local", config("http://localhost:1/mcp"))).await.unwrap().server;
    assert_eq!(named.status.state, McpServerStatusState::Error);
    assert!(named.status.error.unwrap().contains("is a private or local network address"));
    let mut many = config("https://example.com/mcp");
    many.headers = Some((0..17).map(|i| (format!("x-{i}"), "v".to_owned())).collect());
    assert_eq!(refused(user.call(set("x", many)).await), "Too many MCP server headers");
    let mut definition = definition("Grants");
    definition.mcp_servers = Some(vec!["NotASlug".into()]);
    assert_eq!(
        refused(user.call(CreateAgent { client_request_id: None, definition }).await),
        "Invalid MCP server name: NotASlug"
    );
    server.stop().await;
}
