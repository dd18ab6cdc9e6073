//! Agent tools: the `*AgentTool*` actions over tool documents (CIDs, lambdas saved, renamed and
//! deleted, builtins read-only), `~/tools` and `call` as user verbs, and agent turns that search
//! the fake Hypermedia server, miss, send bad input, list a space with `query` and read a
//! document's `attributes`, and use `web_search` against a fake SearXNG
//! (offered only when one is configured).

use std::time::Duration;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AgentToolInfo, AgentToolInfoKind, AgentToolInput, AgentToolInputRuntime, DeleteAgentTool, GetSession,
    InvokeSessionToolVerb, ListAgentTools, SaveAgentTool, SessionEventPayload, SetModelProvider,
};
use seed_agents_protocol::{Value, wire};
use seed_agents_server::testing::bus::{ChangeReason, Event};
use serde_json::{Value as Json, json};

use crate::support::fixtures::{invoke, tool_output as output};
use crate::support::hm::FakeHm;
use crate::support::provider::{Provider, Script};
use crate::support::searxng::FakeSearxng;
use crate::support::{TestServer, User, api_error, custom_provider_config, definition, say};

fn schema(value: Json) -> std::collections::BTreeMap<String, Value> {
    match wire::json_to_ipld(&value) {
        Ipld::Map(fields) => fields.into_iter().map(|(key, value)| (key, Value(value))).collect(),
        other => panic!("{other:?}"),
    }
}

fn word_count(name: &str) -> AgentToolInput {
    AgentToolInput {
        extra: Default::default(),
        description: "Counts words in a text. Splits on whitespace.".into(),
        input: schema(json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})),
        name: name.into(),
        output: None,
        runtime: AgentToolInputRuntime::Typescript,
        source: "export default (input) => ({count: input.text.split(/\\s+/).length})".into(),
        summary: None,
    }
}

fn save(agent_id: &str, tool: AgentToolInput, previous: Option<&str>) -> SaveAgentTool {
    SaveAgentTool { agent_id: agent_id.into(), previous_name: previous.map(str::to_owned), tool }
}

async fn list(user: &User, agent_id: &str) -> Vec<AgentToolInfo> {
    user.call(ListAgentTools { agent_id: agent_id.into() }).await.unwrap().tools
}

fn named<'a>(tools: &'a [AgentToolInfo], name: &str) -> &'a AgentToolInfo {
    tools.iter().find(|tool| tool.name == name).unwrap_or_else(|| panic!("no {name} in {tools:?}"))
}

#[tokio::test]
async fn tool_documents_have_stable_cids_and_lambdas_are_saved_renamed_and_deleted() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Toolsmith").await;
    let app = server.server.as_ref().unwrap().app().clone();

    let tools = list(&owner, &agent).await;
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["attributes", "execute", "query", "search", "web_search"]);
    let search = named(&tools, "search");
    assert_eq!((search.kind, search.granted, search.enabled), (AgentToolInfoKind::Builtin, true, true));
    assert!(search.cid.starts_with("bafyrei"), "{}", search.cid);
    assert!(search.source.is_none() && search.input.contains_key("properties"));
    assert!(!named(&tools, "web_search").granted, "no SearXNG configured: not granted");
    // Listing again rewrites nothing: same CIDs, same timestamps.
    assert_eq!(list(&owner, &agent).await, tools);

    let mut bus = app.bus.subscribe();
    let saved = owner.call(save(&agent, word_count("word_count"), None)).await.unwrap().tool;
    assert_eq!(
        (saved.kind, saved.granted, saved.summary.as_str()),
        (AgentToolInfoKind::Lambda, true, "Counts words in a text.")
    );
    assert!(saved.cid.starts_with("bafyrei") && saved.source.is_some());
    let event = tokio::time::timeout(Duration::from_secs(5), bus.recv()).await.unwrap().unwrap();
    assert_eq!(
        *event,
        Event::AccountChange {
            account_id: owner.id.to_string(),
            reason: ChangeReason::AgentToolsChanged,
            agent_id: Some(agent.to_string()),
            session_id: None,
        }
    );
    assert_eq!(named(&list(&owner, &agent).await, "word_count").cid, saved.cid, "the listed CID is the saved one");

    // A second tool of the same name is a conflict; editing in place is not.
    let conflict = api_error(owner.call(save(&agent, word_count("word_count"), None)).await);
    assert_eq!(conflict, (409, "A tool named \"word_count\" already exists".into()));
    let edited = AgentToolInput { summary: Some("Count words.".into()), ..word_count("word_count") };
    let edited = owner.call(save(&agent, edited, Some("word_count"))).await.unwrap().tool;
    assert_ne!(edited.cid, saved.cid, "a changed document is a new version");
    assert_eq!(edited.created_at, saved.created_at);

    // Renaming keeps createdAt and removes the old name, atomically.
    let renamed = AgentToolInput { runtime: AgentToolInputRuntime::Python, ..word_count("token_count") };
    let renamed = owner.call(save(&agent, renamed, Some("word_count"))).await.unwrap().tool;
    assert_eq!((renamed.name.as_str(), renamed.created_at), ("token_count", saved.created_at));
    owner.call(save(&agent, word_count("other_count"), None)).await.unwrap();
    let clash = api_error(owner.call(save(&agent, word_count("other_count"), Some("token_count"))).await);
    assert_eq!(clash, (409, "A tool named \"other_count\" already exists".into()));
    let names: Vec<String> = list(&owner, &agent).await.into_iter().map(|tool| tool.name).collect();
    assert_eq!(names, ["attributes", "execute", "other_count", "query", "search", "token_count", "web_search"]);

    // Builtins are read-only; bad lambdas are refused with the reason.
    let missing = api_error(owner.call(save(&agent, word_count("x_count"), Some("nope"))).await);
    assert_eq!(missing, (404, "Tool \"nope\" not found".into()));
    let builtin = api_error(owner.call(save(&agent, word_count("x_count"), Some("search"))).await);
    assert_eq!(builtin, (400, "Builtin tools cannot be edited".into()));
    let taken = api_error(owner.call(save(&agent, word_count("search"), None)).await);
    assert_eq!(taken.0, 409, "{taken:?}");
    let bad_name = api_error(owner.call(save(&agent, word_count("Words"), None)).await);
    assert_eq!(bad_name, (400, "Tool name must be lowercase [a-z0-9_-], start with a letter, 2-64 chars".into()));
    let unsupported = AgentToolInput { input: schema(json!({"type": "object", "oneOf": []})), ..word_count("odd") };
    let (status, message) = api_error(owner.call(save(&agent, unsupported, None)).await);
    assert_eq!(status, 400);
    assert!(message.starts_with("Tool input schema is not supported: "), "{message}");

    let delete = |name: &str| DeleteAgentTool { agent_id: agent.clone(), name: name.into() };
    let builtin = api_error(owner.call(delete("search")).await);
    assert_eq!(builtin, (400, "\"search\" is a builtin tool; disable it via the agent's tool grants instead".into()));
    assert!(owner.call(delete("token_count")).await.unwrap().deleted);
    assert!(!owner.call(delete("token_count")).await.unwrap().deleted);
    let names: Vec<String> = list(&owner, &agent).await.into_iter().map(|tool| tool.name).collect();
    assert_eq!(names, ["attributes", "execute", "other_count", "query", "search", "web_search"]);
    server.stop().await;
}

#[tokio::test]
async fn users_read_tools_and_call_search_through_the_hypermedia_server() {
    let hm = FakeHm::start().await;
    hm.set_search_entities(vec![
        json!({"id": {"uid": "z6MkAuthor", "path": ["notes", "seed"]}, "title": "Seed notes", "type": "document",
               "parentNames": ["Notes"], "versionTime": "2026-01-02T03:04:05Z"}),
        json!({"id": "hm://z6MkOther", "title": "", "type": "contact", "parentNames": []}),
    ]);
    let url = hm.url.clone();
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), move |config| config.hm_server_url = url).await;
    let owner = server.user();
    let agent = owner.create_agent("Finder").await;
    let session_id = owner.create_session(&agent, Some("Look")).await;
    let call = |input: Json| invoke(&session_id, InvokeSessionToolVerb::Call, input);
    let read = |address: &str| invoke(&session_id, InvokeSessionToolVerb::Read, json!({"address": address}));

    let found = output(&owner.call(call(json!({"tool": "search", "input": {"query": "seed"}}))).await.unwrap());
    assert_eq!(found["summary"], "Found 2 results for \"seed\".");
    assert_eq!((found["searchType"].as_str(), found["includeBody"].as_bool()), (Some("hybrid"), Some(false)));
    assert_eq!(found["results"][0]["url"], "hm://z6MkAuthor/notes/seed");
    assert_eq!(found["results"][0]["versionTime"], "2026-01-02T03:04:05Z");
    assert_eq!(found["results"][1]["title"], "hm://z6MkOther", "an untitled result is named by its URL");
    let markdown = found["markdown"].as_str().unwrap();
    assert!(markdown.contains("1. [Seed notes](hm://z6MkAuthor/notes/seed)\n   - Type: document\n   - Parents: Notes"));
    let asked = &hm.searches()[0];
    let param = |key: &str| asked.get(key).map(String::as_str);
    assert_eq!(param("query"), Some("seed"));
    assert_eq!(param("perspectiveAccountUid"), Some(owner.id.as_str()));
    assert_eq!((param("searchType"), param("pageSize"), param("contextSize")), (Some("2"), Some("20"), Some("48")));
    assert_eq!((param("includeBody"), param("accountUid")), (Some("false"), None));

    // A failing Hypermedia server is the call's error, with its status and message.
    hm.fail_with(Some((500, "reindexing")));
    let failed = owner.call(call(json!({"tool": "search", "input": {"query": "seed"}}))).await.unwrap();
    let error = failed.error.unwrap();
    assert!(error.starts_with(&format!("Search failed on {}: HTTP 500 from Search", hm.url)), "{error}");
    assert!(error.ends_with("reindexing"), "{error}");
    hm.fail_with(None);

    // Bad input is answered with the contract, a miss with the listing: both successes.
    let bad = output(&owner.call(call(json!({"tool": "search", "input": {"query": 5}}))).await.unwrap());
    assert_eq!(
        bad["summary"],
        "Input for search did not match its contract — here it is; call again with valid input."
    );
    assert!(bad["contract"].as_str().unwrap().starts_with("# search\n"));
    assert!(bad["validationErrors"][0].as_str().unwrap().starts_with("$.query: "), "{bad}");
    let miss = output(&owner.call(call(json!({"tool": "web_search", "input": {"query": "x"}}))).await.unwrap());
    assert_eq!(miss["summary"], "No callable tool named web_search. Here is what you can call.");
    assert_eq!(miss["tools"], json!(["attributes", "query", "search"]));
    assert_eq!(hm.searches().len(), 1, "neither reached the server (the failed one was refused before)");

    // The listing, a verb's contract, a document's contract with its CID.
    let listing = output(&owner.call(read("~/tools/")).await.unwrap());
    assert_eq!(listing["summary"], "5 verbs and 3 callable tools.");
    let markdown = listing["markdown"].as_str().unwrap();
    assert!(markdown.starts_with("# ~/tools\n\n## Verbs (always available)\n- read — "), "{markdown}");
    assert!(markdown.contains("## Callable with the call verb\n- attributes — Get a Seed"), "{markdown}");
    assert!(markdown.contains("\n- query — List the documents under a path of a Seed Hypermedia space, with their titles and update times.\n- search — Search published"), "{markdown}");
    let verb = output(&owner.call(read("~/tools/write")).await.unwrap());
    assert!(verb["markdown"].as_str().unwrap().contains("## Input schema\n```json\n"));
    let contract = output(&owner.call(read("~/tools/search")).await.unwrap());
    let cid = named(&list(&owner, &agent).await, "search").cid.clone();
    assert_eq!(contract["summary"], format!("Contract for search ({cid})."));
    assert_eq!((contract["cid"].as_str(), contract["kind"].as_str()), (Some(cid.as_str()), Some("builtin")));
    let hidden = output(&owner.call(read("~/tools/web_search")).await.unwrap());
    assert_eq!(hidden["summary"], "No tool named web_search.", "an ungranted builtin reads as unknown");

    // An authored tool: saved and listed, its input checked, then refused (this server runs no code).
    let document = json!({"description": "Counts words.", "input": {"type": "object", "properties": {"text": {"type": "string"}},
                                                                     "required": ["text"]}, "source": "def main(i): return 1",
                          "runtime": "python"});
    let write = invoke(
        &session_id,
        InvokeSessionToolVerb::Write,
        json!({"address": "~/tools/word_count", "content": document.to_string()}),
    );
    let saved = output(&owner.call(write).await.unwrap());
    assert!(saved["summary"].as_str().unwrap().starts_with("Saved tool word_count (bafyrei"), "{saved}");
    assert_eq!(named(&list(&owner, &agent).await, "word_count").cid, saved["cid"].as_str().unwrap());
    let listing = output(&owner.call(read("~/tools")).await.unwrap());
    assert_eq!(listing["tools"], json!(["attributes", "query", "search"]), "only what runs is callable");
    let markdown = listing["markdown"].as_str().unwrap();
    assert!(markdown.contains("## Authored tools (lambdas)\n- word_count — Counts words."), "{markdown}");
    let refused = owner.call(call(json!({"tool": "word_count", "input": {"text": "a b"}}))).await.unwrap();
    let refused = refused.error.unwrap();
    assert!(refused.contains("python does not run on this server: Code execution is disabled"), "{refused}");
    let misfit = output(&owner.call(call(json!({"tool": "word_count", "input": {}}))).await.unwrap());
    assert!(misfit["contract"].as_str().unwrap().contains("> lambda tool · version `bafyrei"), "{misfit}");
    let not_json = invoke(&session_id, InvokeSessionToolVerb::Write, json!({"address": "~/tools/x_y", "content": "{"}));
    assert_eq!(
        owner.call(not_json).await.unwrap().error.as_deref(),
        Some("write ~/tools/<name> expects JSON content: {description, input, output?, source, runtime?}")
    );
    let delete = invoke(
        &session_id,
        InvokeSessionToolVerb::Write,
        json!({"address": "~/tools/word_count", "options": {"delete": true}}),
    );
    assert_eq!(output(&owner.call(delete).await.unwrap())["deleted"], true);
    server.stop().await;
}

/// A server whose turns go to `provider` and whose HM server is `hm`, with SearXNG at `searxng`.
async fn agent_setup(
    provider: &Provider,
    hm: &FakeHm,
    searxng: Option<&str>,
) -> (TestServer, User, seed_agents_protocol::AgentId, seed_agents_protocol::SessionId) {
    let (hm_url, searxng) = (hm.url.clone(), searxng.map(str::to_owned));
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), move |config| {
        config.session_title_generation = false;
        config.provider_timeout = Duration::from_secs(5);
        config.hm_server_url = hm_url;
        config.searxng_url = searxng;
    })
    .await;
    let user = server.user();
    user.call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let agent = user
        .call(seed_agents_protocol::generated::CreateAgent { client_request_id: None, definition: definition("Scout") })
        .await
        .unwrap()
        .agent_id;
    let session_id = user.create_session(&agent, None).await;
    (server, user, agent, session_id)
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
async fn a_model_searches_misses_and_corrects_itself_then_uses_search_as_its_own_tool() {
    let provider = Provider::start().await;
    let hm = FakeHm::start().await;
    hm.set_search_entities(vec![json!({"id": "hm://z6MkA/intro", "title": "Intro", "type": "document"})]);
    let (server, user, _agent, session_id) = agent_setup(&provider, &hm, None).await;
    provider.push(
        Script::tool_call("c1", "call", r#"{"tool":"search","input":{"query":"intro","pageSize":3}}"#)
            .and_tool_call("c2", "call", r#"{"tool":"bash","input":{"cmd":"ls"}}"#)
            .and_tool_call("c3", "call", r#"{"tool":"search","input":{"query":"intro","pageSize":"many"}}"#),
    );
    provider.push(Script::text("Found the intro."));
    user.call(say(&session_id, "find the intro")).await.unwrap();
    let done = results(&user, &session_id).await;
    assert_eq!(done.len(), 3, "{done:?}");
    assert!(done.iter().all(|(name, _, error)| name == "call" && error.is_none()), "{done:?}");
    let by_summary =
        |start: &str| done.iter().find(|(_, output, _)| output["summary"].as_str().unwrap().starts_with(start));
    let found = &by_summary("Found 1 result").unwrap().1;
    assert_eq!(found["results"][0]["url"], "hm://z6MkA/intro");
    assert_eq!(
        by_summary("No callable tool named bash.").unwrap().1["tools"],
        json!(["attributes", "query", "search"])
    );
    let misfit = &by_summary("Input for search did not match").unwrap().1;
    assert!(misfit["validationErrors"][0].as_str().unwrap().starts_with("$.pageSize: "), "{misfit}");
    assert_eq!(hm.searches().len(), 1);
    assert_eq!(hm.searches()[0].get("pageSize").map(String::as_str), Some("3"));
    // The model saw the search results as the call's result, in call order.
    let second = &provider.requests()[1].body["messages"];
    assert_eq!(second[3]["tool_call_id"], "c1");
    assert!(second[3]["content"].as_str().unwrap().contains("hm://z6MkA/intro"));
    assert_eq!(
        tool_names(&provider.requests()[0]),
        ["read", "write", "call", "delegate", "plan", "status", "continue_session"]
    );

    // Next turn, `search` is a tool of its own (never `bash`), and runs as `call`.
    provider.push(Script::tool_call("c4", "search", r#"{"query":"more"}"#));
    provider.push(Script::text("More."));
    user.call(say(&session_id, "more")).await.unwrap();
    let requests = provider.requests();
    assert_eq!(
        tool_names(&requests[2]),
        ["search", "read", "write", "call", "delegate", "plan", "status", "continue_session"]
    );
    let done = results(&user, &session_id).await;
    let (name, output, error) = done.last().unwrap();
    assert_eq!((name.as_str(), error), ("search", &None));
    assert_eq!(output["query"], "more");
    assert_eq!(hm.searches()[1].get("query").map(String::as_str), Some("more"));
    server.stop().await;
}

#[tokio::test]
async fn a_model_lists_a_space_with_query_and_reads_attributes() {
    const UID: &str = "z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
    let provider = Provider::start().await;
    let hm = FakeHm::start().await;
    hm.set_documents(vec![
        json!({"account": UID, "path": "/notes", "metadata": {"name": "Notes"}, "updateTime": "2026-01-03T00:00:00Z"}),
        json!({"account": UID, "path": "/notes/birds", "metadata": {"name": "Birds"}, "updateTime": "2026-01-01T00:00:00Z"}),
        json!({"account": UID, "path": "/notes/trees", "metadata": {"name": "Trees"}, "updateTime": "2026-01-02T00:00:00Z"}),
        json!({"account": UID, "path": "/notes/trees/oak", "metadata": {"name": "Oak"}, "updateTime": "2026-01-04T00:00:00Z"}),
        json!({"account": "z6MkOther", "path": "/notes/x", "metadata": {"name": "Elsewhere"}}),
    ]);
    hm.answer(
        "Resource",
        &[("id", &format!("hm://{UID}/notes/trees"))],
        json!({"type": "document", "document": {"account": UID, "path": "/notes/trees", "version": "bafyv1",
            "metadata": {"name": "Trees", "summary": "Woody plants"}, "content": [
                {"block": {"id": "b1", "type": "Paragraph", "text": "SECRET BODY", "annotations": []}}]}}),
    );
    let (server, user, agent, session_id) = agent_setup(&provider, &hm, None).await;
    let input = json!({"tool": "query", "input": {"space": format!("hm://{UID}/notes"), "mode": "AllDescendants",
        "sort": "UpdateTime", "reverse": true, "limit": 2}});
    provider.push(
        Script::tool_call("q1", "call", &input.to_string())
            .and_tool_call(
                "q2",
                "call",
                &json!({"tool": "query", "input": {"space": UID, "path": "/notes"}}).to_string(),
            )
            .and_tool_call(
                "a1",
                "call",
                &json!({"tool": "attributes", "input": {"url": format!("hm://{UID}/notes/trees")}}).to_string(),
            ),
    );
    provider.push(Script::text("Listed."));
    user.call(say(&session_id, "what is under notes?")).await.unwrap();
    let done = results(&user, &session_id).await;
    assert_eq!(done.len(), 3, "{done:?}");
    assert!(done.iter().all(|(name, _, error)| name == "call" && error.is_none()), "{done:?}");
    // The whole subtree, newest first, cut to two.
    let newest = &done[0].1;
    assert_eq!(newest["type"], "hypermedia_directory");
    assert_eq!(newest["mode"], "AllDescendants");
    let ids: Vec<&str> = newest["entries"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [format!("hm://{UID}/notes/trees/oak"), format!("hm://{UID}/notes/trees")]);
    // One level, in the server's order, never another account's.
    let children = &done[1].1;
    assert_eq!(children["summary"], format!("2 documents under hm://{UID}/notes."));
    assert_eq!(
        children["entries"][0],
        json!({"id": format!("hm://{UID}/notes/birds"), "title": "Birds",
        "updateTime": "2026-01-01T00:00:00Z"})
    );
    // The attributes, without the body.
    let attributes = &done[2].1;
    assert_eq!((attributes["view"].as_str(), attributes["version"].as_str()), (Some("attributes"), Some("bafyv1")));
    assert_eq!(attributes["metadata"], json!({"name": "Trees", "summary": "Woody plants"}));
    assert!(!attributes.to_string().contains("SECRET BODY"), "{attributes}");
    // The Query requests carried the callable's input in the server's shape.
    let queries: Vec<_> = hm.queries().into_iter().filter(|(key, _)| key == "Query").collect();
    let sent = |index: usize, name: &str| serde_json::from_str::<Json>(&queries[index].1[name]).unwrap();
    assert_eq!(sent(0, "includes"), json!([{"space": UID, "path": "/notes", "mode": "AllDescendants"}]));
    assert_eq!(sent(0, "sort"), json!([{"term": "UpdateTime", "reverse": true}]));
    assert_eq!(sent(0, "limit"), json!(2));
    assert_eq!(sent(1, "includes"), json!([{"space": UID, "path": "/notes", "mode": "Children"}]));
    assert!(!queries[1].1.contains_key("sort"));
    // The model saw the listing as the call's result.
    let second = &provider.requests()[1].body["messages"];
    assert!(second.to_string().contains("notes/trees/oak"));

    // Granted like search: an agent whose tools name only search cannot call either.
    let mut narrowed = definition("Scout");
    narrowed.tools = Some(vec!["search".into()]);
    user.call(seed_agents_protocol::generated::UpdateAgent { agent_id: agent.clone(), definition: narrowed })
        .await
        .unwrap();
    provider.push(Script::tool_call("q3", "call", &input.to_string()));
    provider.push(Script::text("Cannot."));
    user.call(say(&session_id, "again")).await.unwrap();
    let done = results(&user, &session_id).await;
    assert_eq!(done[3].1["summary"], "No callable tool named query. Here is what you can call.");
    assert_eq!(done[3].1["tools"], json!(["search"]));
    let names: Vec<String> = list(&user, &agent).await.into_iter().filter(|t| t.granted).map(|t| t.name).collect();
    assert_eq!(names, ["search"]);
    server.stop().await;
}

#[tokio::test]
async fn web_search_is_offered_only_with_a_searxng_backend() {
    // Without SearXNG: the model's call is a miss and web_search never becomes a tool.
    let provider = Provider::start().await;
    let hm = FakeHm::start().await;
    let (server, user, agent, session_id) = agent_setup(&provider, &hm, None).await;
    provider.push(Script::tool_call("w1", "call", r#"{"tool":"web_search","input":{"query":"rust"}}"#));
    provider.push(Script::text("No web."));
    provider.push(Script::text("Still none."));
    user.call(say(&session_id, "search the web")).await.unwrap();
    user.call(say(&session_id, "again")).await.unwrap();
    let done = results(&user, &session_id).await;
    assert_eq!(done[0].1["summary"], "No callable tool named web_search. Here is what you can call.");
    for request in provider.requests() {
        assert_eq!(tool_names(&request), ["read", "write", "call", "delegate", "plan", "status", "continue_session"]);
        let call = request.body["tools"][2]["function"]["description"].as_str().unwrap().to_owned();
        assert!(!call.contains("web_search"), "{call}");
    }
    assert!(!named(&list(&user, &agent).await, "web_search").granted);
    assert_eq!(health(&server).await["webTools"]["search"], false);
    server.stop().await;

    // With SearXNG: granted, found after a retry on other engines, and offered once touched.
    let provider = Provider::start().await;
    let searxng = FakeSearxng::start().await;
    searxng.push(json!({"results": [], "unresponsive_engines": [["google", "timeout"]]}));
    searxng.push(json!({
        "results": [
            {"title": "The Rust Book", "url": "https://doc.rust-lang.org/book/", "content": "Learn Rust.", "engine": "bing"},
            {"title": "No URL"},
            {"title": "", "url": "https://rust-lang.org/", "engine": "duckduckgo"}
        ],
        "unresponsive_engines": []
    }));
    let (server, user, agent, session_id) = agent_setup(&provider, &hm, Some(&searxng.url)).await;
    assert!(named(&list(&user, &agent).await, "web_search").granted);
    assert_eq!(health(&server).await["webTools"]["search"], true);
    provider.push(Script::tool_call("r1", "read", r#"{"address":"~/tools/web_search"}"#));
    provider.push(Script::text("I can search the web."));
    provider.push(Script::tool_call(
        "w2",
        "web_search",
        r#"{"query":"rust book","count":5,"category":"news","timeRange":"week"}"#,
    ));
    provider.push(Script::text("Here it is."));
    user.call(say(&session_id, "can you search the web?")).await.unwrap();
    user.call(say(&session_id, "find the rust book")).await.unwrap();
    let requests = provider.requests();
    assert_eq!(tool_names(&requests[0]), ["read", "write", "call", "delegate", "plan", "status", "continue_session"]);
    assert_eq!(
        tool_names(&requests[2]),
        ["web_search", "read", "write", "call", "delegate", "plan", "status", "continue_session"]
    );
    let done = results(&user, &session_id).await;
    assert!(done[0].1["markdown"].as_str().unwrap().starts_with("# web_search\n\n> builtin tool · version `bafyrei"));
    let (name, found, error) = &done[1];
    assert_eq!((name.as_str(), error), ("web_search", &None));
    assert_eq!(found["summary"], "Found 2 web results for \"rust book\".");
    assert_eq!(found["partial"], false);
    assert_eq!(
        found["results"][0],
        json!({"title": "The Rust Book", "url": "https://doc.rust-lang.org/book/",
                                             "snippet": "Learn Rust.", "engine": "bing"})
    );
    assert_eq!(found["results"][1]["title"], "https://rust-lang.org/");
    let asked = searxng.requests();
    assert_eq!(asked.len(), 2, "retried once on other engines");
    let first = &asked[0];
    let param = |key: &str| first.get(key).map(String::as_str);
    assert_eq!((param("q"), param("format"), param("categories")), (Some("rust book"), Some("json"), Some("news")));
    assert_eq!((param("safesearch"), param("language"), param("time_range")), (Some("1"), Some("en"), Some("week")));
    assert_eq!(param("engines"), None);
    assert_eq!(asked[1].get("engines").map(String::as_str), Some("duckduckgo,bing,startpage,wikipedia"));
    server.stop().await;
}

async fn health(server: &TestServer) -> Json {
    let response = server.http.get(format!("{}/api/health", server.url)).send().await.unwrap();
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}
