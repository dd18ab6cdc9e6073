//! `read hm://…`, `read activity:` and `read http(s)://…`: user verbs (`InvokeSessionTool`) and a
//! model turn against the fake Hypermedia server (`support::hm`) and a web server on loopback.
//! Loopback is private, so the web tests turn `allow_private_network` on; one test shows the
//! guard refusing loopback with the default configuration.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    InvokeSessionTool, InvokeSessionToolResponse, InvokeSessionToolVerb, UploadSessionAttachment,
};
use seed_agents_protocol::{Bytes, Value, wire};
use serde_json::{Value as Json, json};

use crate::support::hm::FakeHm;
use crate::support::provider::{Provider, Script};
use crate::support::{TestServer, User, custom_provider_config, definition};

const UID: &str = "z6MkhQQtSzw5wRsR3Yk4kbzmCDeHCgVmS2A9GXBvV6uXo4jV";

pub(crate) async fn start(
    hm: &FakeHm,
    allow_private_network: bool,
) -> (TestServer, User, seed_agents_protocol::SessionId) {
    let url = hm.url.clone();
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), move |config| {
        config.hm_server_url = url;
        config.allow_private_network = allow_private_network;
    })
    .await;
    let user = server.user();
    let agent_id = user.create_agent("Reader").await;
    let session_id = user.create_session(&agent_id, None).await;
    (server, user, session_id)
}

fn read(session_id: &str, address: &str, options: Option<Json>) -> InvokeSessionTool {
    let mut input = json!({ "address": address });
    if let Some(options) = options {
        input["options"] = options;
    }
    InvokeSessionTool {
        input: Value(wire::to_ipld(&input).unwrap()),
        session_id: session_id.into(),
        verb: InvokeSessionToolVerb::Read,
    }
}

/// The output as JSON (panics with the error when the verb failed).
pub(crate) fn output(response: &InvokeSessionToolResponse) -> Json {
    let output = response.output.as_ref().unwrap_or_else(|| panic!("verb failed: {:?}", response.error));
    wire::from_ipld::<Json>(output.as_ipld().clone()).unwrap()
}

fn document(path: &str) -> Json {
    json!({
        "type": "document",
        "id": { "id": format!("hm://{UID}{path}"), "uid": UID },
        "document": {
            "account": UID,
            "path": path,
            "version": "bafyversion1",
            "authors": [UID],
            "metadata": { "name": "Field notes" },
            "content": [
                { "block": { "id": "a1", "type": "Heading", "text": "Birds", "annotations": [] }, "children": [
                    { "block": { "id": "a2", "type": "Paragraph", "text": "A heron and a crane.",
                      "annotations": [ { "type": "Italic", "starts": [2], "ends": [7] } ] } }
                ] },
                { "block": { "id": "a3", "type": "Code", "text": "count = 2", "attributes": { "language": "python" } } }
            ]
        }
    })
}

const NOTES_MARKDOWN: &str = "# Field notes\n\n## Birds\n\nA _heron_ and a crane.\n\n```python\ncount = 2\n```\n";

#[tokio::test]
async fn hm_documents_read_as_markdown_attributes_json_and_errors() {
    let hm = FakeHm::start().await;
    hm.answer("Resource", &[("id", &format!("hm://{UID}/notes"))], document("/notes"));
    hm.answer("Resource", &[("id", &format!("hm://{UID}/notes?v=bafyold"))], document("/notes"));
    hm.answer("Resource", &[("id", &format!("hm://{UID}/gone"))], json!({ "type": "not-found", "id": {} }));
    hm.answer_error("Resource", &[("id", &format!("hm://{UID}/broken"))], 500, "daemon unavailable");
    let (server, user, session_id) = start(&hm, false).await;

    let response = user.call(read(&session_id, &format!(" hm://{UID}/notes#a2 "), None)).await.unwrap();
    let page = output(&response);
    assert_eq!(page["type"], "hypermedia_document");
    assert_eq!(page["requestedId"], format!("hm://{UID}/notes#a2"));
    assert_eq!(page["id"], format!("hm://{UID}/notes"));
    assert_eq!(page["server"], hm.url);
    assert_eq!((page["format"].as_str(), page["title"].as_str()), (Some("markdown"), Some("Field notes")));
    assert_eq!(page["version"], "bafyversion1");
    assert_eq!(page["metadata"], json!({ "name": "Field notes" }));
    assert_eq!(page["markdown"], NOTES_MARKDOWN);
    assert!(page["summary"].as_str().unwrap().starts_with("Read Field notes"), "{page}");
    assert!(page.get("truncated").is_none() && page.get("resource").is_none(), "{page}");

    // A version is passed on; the attributes view has no body; JSON hands back the answer.
    let versioned = user.call(read(&session_id, &format!("hm://{UID}/notes?v=bafyold"), None)).await.unwrap();
    assert_eq!(output(&versioned)["markdown"], NOTES_MARKDOWN);
    let attributes =
        output(&user.call(read(&session_id, &format!("hm://{UID}/notes/:attributes"), None)).await.unwrap());
    assert_eq!((attributes["view"].as_str(), attributes["title"].as_str()), (Some("attributes"), Some("Field notes")));
    assert!(attributes.get("markdown").is_none(), "{attributes}");
    let raw = user.call(read(&session_id, &format!("hm://{UID}/notes"), Some(json!({ "format": "json" })))).await;
    let raw = output(&raw.unwrap());
    assert_eq!((raw["format"].as_str(), &raw["resource"]), (Some("json"), &document("/notes")));

    // Failures come back in `error` (and the log), with the server's words.
    let gone = user.call(read(&session_id, &format!("hm://{UID}/gone"), None)).await.unwrap();
    assert_eq!(gone.error.as_deref(), Some(format!("Hypermedia resource not found: hm://{UID}/gone").as_str()));
    let broken = user.call(read(&session_id, &format!("hm://{UID}/broken"), None)).await.unwrap();
    let broken = broken.error.unwrap();
    assert!(broken.contains("HTTP 500 from Resource") && broken.contains("daemon unavailable"), "{broken}");
    let invalid = user.call(read(&session_id, "hm://not valid/x", None)).await.unwrap();
    assert_eq!(invalid.error.as_deref(), Some("Invalid Hypermedia id: hm://not valid/x"));
    let comments = user.call(read(&session_id, &format!("hm://{UID}/notes/:comments"), None)).await.unwrap();
    assert!(comments.error.unwrap().starts_with("The :comments view of Hypermedia ids is not supported"));
    let other = user.call(read(&session_id, "gopher://x", None)).await.unwrap();
    assert!(other.error.unwrap().starts_with("Unrecognized address: gopher://x. Supported here:"));

    let asked: Vec<String> = hm.queries().iter().map(|(key, params)| format!("{key} {}", params["id"])).collect();
    assert_eq!(asked[..2], [format!("Resource hm://{UID}/notes"), format!("Resource hm://{UID}/notes?v=bafyold")]);
    server.stop().await;
}

#[tokio::test]
async fn comments_directories_and_profiles() {
    let hm = FakeHm::start().await;
    let comment_id = format!("hm://{UID}/zCommentTsid");
    hm.answer(
        "Resource",
        &[("id", &comment_id)],
        json!({ "type": "comment", "id": {}, "comment": {
            "id": format!("{UID}/zCommentTsid"), "version": "bafycomment", "author": UID,
            "targetAccount": UID, "targetPath": "/notes", "targetVersion": "bafyversion1",
            "content": [ { "block": { "id": "c1", "type": "Paragraph", "text": "Nice list", "annotations": [
                { "type": "Bold", "starts": [0], "ends": [4] } ] } } ]
        } }),
    );
    let includes = json!([{ "space": UID, "path": "/notes", "mode": "Children" }]).to_string();
    hm.answer(
        "Query",
        &[("includes", &includes)],
        json!({ "in": {}, "results": [
            { "id": { "id": format!("hm://{UID}/notes/birds") }, "path": "/notes/birds",
              "metadata": { "name": "Birds" }, "updateTime": "2026-01-01T00:00:00Z" },
            { "path": ["notes", "trees"], "metadata": {} }
        ] }),
    );
    hm.answer(
        "Account",
        &[("id", UID)],
        json!({ "type": "account", "id": { "uid": UID }, "metadata": { "name": "Ada", "summary": "Birdwatcher", "icon": null } }),
    );
    hm.answer("Account", &[("id", "z6Mknobody")], json!({ "type": "account-not-found", "uid": "z6Mknobody" }));
    let (server, user, session_id) = start(&hm, false).await;

    let comment = output(&user.call(read(&session_id, &comment_id, None)).await.unwrap());
    assert_eq!(comment["type"], "hypermedia_comment");
    assert_eq!(comment["markdown"], "**Nice** list\n");
    assert_eq!(comment["target"], format!("hm://{UID}/notes"));
    assert_eq!(comment["id"], comment_id);

    let listing = output(&user.call(read(&session_id, &format!("hm://{UID}/notes/:directory"), None)).await.unwrap());
    assert_eq!(listing["type"], "hypermedia_directory");
    assert_eq!(listing["summary"], format!("2 documents under hm://{UID}/notes."));
    assert_eq!(
        listing["entries"][0],
        json!({ "id": format!("hm://{UID}/notes/birds"), "title": "Birds",
        "updateTime": "2026-01-01T00:00:00Z" })
    );
    assert_eq!(listing["entries"][1], json!({ "id": format!("hm://{UID}/notes/trees") }));
    assert!(listing["markdown"].as_str().unwrap().contains(&format!("- [Birds](hm://{UID}/notes/birds)")));

    let profile = output(&user.call(read(&session_id, &format!("hm://{UID}/:profile"), None)).await.unwrap());
    assert_eq!((profile["type"].as_str(), profile["title"].as_str()), (Some("hypermedia_profile"), Some("Ada")));
    assert_eq!(profile["markdown"], format!("# Ada\n\nBirdwatcher\n\nAccount: hm://{UID}\n"));
    assert_eq!(profile["metadata"]["icon"], Json::Null, "{profile}");
    assert!(profile["metadata"].as_object().unwrap().contains_key("icon"));
    let nobody = user.call(read(&session_id, "hm://z6Mknobody/:profile", None)).await.unwrap();
    assert_eq!(nobody.error.as_deref(), Some("Hypermedia account not found: z6Mknobody"));
    server.stop().await;
}

#[tokio::test]
async fn activity_maps_its_options_onto_list_events() {
    let hm = FakeHm::start().await;
    // Feed events hold JSON null (an absent reply parent, say); they come through as null.
    let events = json!([{ "type": "comment", "id": "bafy1", "feedEventId": "blob-bafy1", "replyParent": null },
                        { "type": "doc-update", "id": "bafy2", "feedEventId": "blob-bafy2" }]);
    hm.answer("ListEvents", &[], json!({ "events": events, "nextPageToken": "next-1" }));
    hm.answer("ListEvents", &[("pageToken", "next-1")], json!({ "events": [], "nextPageToken": "" }));
    let (server, user, session_id) = start(&hm, false).await;

    let options = json!({ "pageSize": 80, "authors": ["z6Mka", "z6Mkb"], "eventTypes": "comment",
                          "resource": format!("hm://{UID}"), "trustedOnly": true });
    let first = output(&user.call(read(&session_id, "activity:", Some(options))).await.unwrap());
    assert_eq!(first["summary"], "2 activity events; more with options.pageToken = nextPageToken.");
    assert_eq!((&first["events"], first["nextPageToken"].as_str()), (&events, Some("next-1")));
    let last =
        output(&user.call(read(&session_id, "activity:feed", Some(json!({ "pageToken": "next-1" })))).await.unwrap());
    assert_eq!(last["summary"], "0 activity events.");

    let queries = hm.queries();
    let (key, params) = &queries[0];
    assert_eq!(key, "ListEvents");
    let expected = [
        ("currentAccount", user.id.as_str()),
        ("filterAuthors", r#"["z6Mka","z6Mkb"]"#),
        ("filterEventType", r#"["comment"]"#),
        ("filterResource", &format!("hm://{UID}")),
        ("pageSize", "50"),
        ("trustedOnly", "true"),
    ];
    let got: Vec<(&str, &str)> = params.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
    assert_eq!(got, expected);
    assert_eq!(queries[1].1.get("pageToken").map(String::as_str), Some("next-1"));
    server.stop().await;
}

/// A web server on loopback: `/page` (HTML), `/plain` (text), `/image` (PNG bytes), `/big`
/// (HTML over the 200 KiB cap), `/missing` (404); counts the requests it served.
struct Site {
    url: String,
    hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Site {
    async fn start() -> Self {
        use axum::http::header::CONTENT_TYPE;
        use axum::routing::get;
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let big = format!("<html><body><h1>Big</h1><p>{}</p></body></html>", "é".repeat(150 * 1024));
        let app = axum::Router::new()
            .route(
                "/page",
                get(|| async {
                    (
                        [(CONTENT_TYPE, "text/html; charset=utf-8")],
                        "<!doctype html><html><head><title>Herons</title><script>track()</script></head>\
                         <body><nav>Menu</nav><h1>Grey heron</h1><p>Wades in <em>shallow</em> water.</p></body></html>",
                    )
                }),
            )
            .route("/plain", get(|| async { ([(CONTENT_TYPE, "text/plain")], "just <b>text</b>") }))
            .route("/image", get(|| async { ([(CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', b'N', b'G']) }))
            .route("/big", get(move || async move { ([(CONTENT_TYPE, "text/html")], big) }))
            .route("/missing", get(|| async { (axum::http::StatusCode::NOT_FOUND, "nope") }))
            .layer(axum::middleware::from_fn(move |request, next: axum::middleware::Next| {
                counter.fetch_add(1, Ordering::SeqCst);
                async move { next.run(request).await }
            }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { url, hits, task }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn web_pages_read_as_markdown_raw_text_and_clear_errors() {
    let hm = FakeHm::start().await;
    let site = Site::start().await;
    let (server, user, session_id) = start(&hm, true).await;

    let page = output(&user.call(read(&session_id, &format!("{}/page", site.url), None)).await.unwrap());
    assert_eq!(page["type"], "web_page");
    assert_eq!((page["format"].as_str(), page["title"].as_str()), (Some("markdown"), Some("Herons")));
    assert_eq!(page["markdown"], "# Grey heron\n\nWades in *shallow* water.");
    assert_eq!((page["status"].as_u64(), page["truncated"].as_bool()), (Some(200), Some(false)));
    assert_eq!(page["contentType"], "text/html; charset=utf-8");
    assert_eq!(page["summary"], "Read Herons (39 characters).");

    let raw = user.call(read(&session_id, &format!("{}/page", site.url), Some(json!({ "raw": true })))).await;
    let raw = output(&raw.unwrap());
    assert_eq!(raw["format"], "raw");
    assert!(raw["content"].as_str().unwrap().starts_with("<!doctype html><html><head><title>Herons"), "{raw}");
    let plain = output(&user.call(read(&session_id, &format!("{}/plain", site.url), None)).await.unwrap());
    assert_eq!((plain["format"].as_str(), plain["content"].as_str()), (Some("raw"), Some("just <b>text</b>")));

    let big = output(&user.call(read(&session_id, &format!("{}/big", site.url), None)).await.unwrap());
    let markdown = big["markdown"].as_str().unwrap();
    assert!(big["truncated"].as_bool().unwrap() && markdown.len() <= 200 * 1024 && markdown.len() > 200 * 1024 - 4);
    assert!(markdown.starts_with("# Big\n\néé"));

    let image = user.call(read(&session_id, &format!("{}/image", site.url), None)).await.unwrap();
    assert!(image.error.unwrap().contains("is not a text page (image/png)"));
    let missing = user.call(read(&session_id, &format!("{}/missing", site.url), None)).await.unwrap();
    assert_eq!(missing.error.unwrap(), format!("Web page not found: {}/missing (HTTP 404)", site.url));
    // Every web read asked the Hypermedia server about the domain first (not registered: 404).
    let asked =
        hm.queries().iter().filter(|(key, params)| key == "GetDomain" && params["domain"] == "127.0.0.1").count();
    assert_eq!(asked, 6);
    server.stop().await;
}

#[tokio::test]
async fn a_site_registered_to_an_account_reads_as_hypermedia() {
    let hm = FakeHm::start().await;
    let site = Site::start().await;
    hm.answer("GetDomain", &[("domain", "127.0.0.1")], json!({ "domain": "127.0.0.1", "registeredAccountUid": UID }));
    hm.answer("Resource", &[("id", &format!("hm://{UID}/notes"))], document("/notes"));
    hm.answer("Resource", &[("id", &format!("hm://{UID}/page"))], json!({ "type": "not-found", "id": {} }));
    let (server, user, session_id) = start(&hm, true).await;

    let notes = output(&user.call(read(&session_id, &format!("{}/notes", site.url), None)).await.unwrap());
    assert_eq!((notes["type"].as_str(), &notes["markdown"]), (Some("hypermedia_document"), &json!(NOTES_MARKDOWN)));
    assert_eq!(notes["requestedId"], format!("{}/notes", site.url));
    assert_eq!(site.hits.load(Ordering::SeqCst), 0, "the site itself was not fetched");
    // Not found as Hypermedia: the web reader takes over.
    let page = output(&user.call(read(&session_id, &format!("{}/page", site.url), None)).await.unwrap());
    assert_eq!(page["type"], "web_page");
    assert_eq!(site.hits.load(Ordering::SeqCst), 1);
    server.stop().await;
}

#[tokio::test]
async fn the_guard_refuses_private_addresses_by_default() {
    let hm = FakeHm::start().await;
    let site = Site::start().await;
    let (server, user, session_id) = start(&hm, false).await;
    let literal = user.call(read(&session_id, &format!("{}/page", site.url), None)).await.unwrap();
    assert_eq!(literal.error.as_deref(), Some("URL is not allowed: 127.0.0.1 is a private or local network address"));
    let port = site.url.rsplit(':').next().unwrap();
    let named = user.call(read(&session_id, &format!("http://localhost:{port}/page"), None)).await.unwrap();
    assert_eq!(named.error.as_deref(), Some("URL is not allowed: localhost is a private or local network address"));
    let metadata = user.call(read(&session_id, "http://169.254.169.254/latest/meta-data/", None)).await.unwrap();
    assert!(metadata.error.unwrap().starts_with("URL is not allowed: 169.254.169.254"));
    assert_eq!(site.hits.load(Ordering::SeqCst), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_model_turn_reads_a_hypermedia_document_with_the_read_tool() {
    let hm = FakeHm::start().await;
    hm.answer("Resource", &[("id", &format!("hm://{UID}/notes"))], document("/notes"));
    let provider = Provider::start().await;
    let (server, user, session_id) = {
        let url = hm.url.clone();
        let server = TestServer::start_with(tempfile::tempdir().unwrap(), move |config| {
            config.hm_server_url = url;
            config.session_title_generation = false;
        })
        .await;
        let user = server.user();
        let custom = custom_provider_config(provider.openai_base());
        user.call(seed_agents_protocol::generated::SetModelProvider { name: "main".into(), provider: custom })
            .await
            .unwrap();
        let create =
            seed_agents_protocol::generated::CreateAgent { client_request_id: None, definition: definition("Scout") };
        let agent_id = user.call(create).await.unwrap().agent_id;
        let session_id = user.create_session(&agent_id, None).await;
        (server, user, session_id)
    };
    let arguments = json!({ "address": format!("hm://{UID}/notes") }).to_string();
    provider.push(Script::tool_call("call_1", "read", &arguments).split());
    provider.push(Script::text("Herons and cranes."));
    let message = seed_agents_protocol::generated::MessageSession {
        client_message_id: None,
        content: vec![seed_agents_protocol::generated::MessageSessionContentPart::TextContentPart(
            seed_agents_protocol::generated::TextContentPart {
                extra: Default::default(),
                blocks: None,
                client_message_id: None,
                text: "what is in my notes?".into(),
            },
        )],
        session_id: session_id.clone(),
    };
    user.call(message).await.unwrap();
    let second = &provider.requests()[1].body["messages"];
    let tool = second.as_array().unwrap().iter().find(|message| message["role"] == "tool").unwrap();
    assert_eq!(tool["tool_call_id"], "call_1");
    let content: Json = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!((content["type"].as_str(), &content["markdown"]), (Some("hypermedia_document"), &json!(NOTES_MARKDOWN)));
    let log = user
        .call(seed_agents_protocol::generated::GetSession {
            session_id,
            after_seq: None,
            before_seq: None,
            limit: None,
        })
        .await
        .unwrap()
        .events;
    let result = log.iter().find_map(|event| match &event.event {
        seed_agents_protocol::generated::SessionEventPayload::ToolResultEvent(result) => Some(result.clone()),
        _ => None,
    });
    let result = result.unwrap();
    assert_eq!(result.error, None);
    let Some(Ipld::Map(stored)) = result.output.map(|output| output.0) else { panic!("no output") };
    assert_eq!(stored.get("title"), Some(&Ipld::String("Field notes".into())));
    server.stop().await;
}

pub(crate) fn write(session_id: &str, address: &str, content: Option<&str>, options: Json) -> InvokeSessionTool {
    let mut input = json!({ "address": address, "options": options });
    if let Some(content) = content {
        input["content"] = json!(content);
    }
    InvokeSessionTool {
        input: Value(wire::to_ipld(&input).unwrap()),
        session_id: session_id.into(),
        verb: InvokeSessionToolVerb::Write,
    }
}

/// The ops of a published Change, each as `type` plus its block text or id list.
pub(crate) fn ops(blob: &crate::support::hm::Published) -> Vec<String> {
    let Some(Ipld::Map(body)) = blob.field("body") else { panic!("no body") };
    let Some(Ipld::List(ops)) = body.get("ops") else { panic!("no ops") };
    ops.iter()
        .map(|op| {
            let Ipld::Map(op) = op else { panic!("op is not a map") };
            let Some(Ipld::String(kind)) = op.get("type") else { panic!("op without type") };
            match (op.get("block"), op.get("blocks"), op.get("attrs")) {
                (Some(Ipld::Map(block)), ..) => match (block.get("type"), block.get("text"), block.get("link")) {
                    (Some(Ipld::String(block_type)), Some(Ipld::String(text)), None) => {
                        format!("{kind} {block_type} {text}")
                    }
                    (Some(Ipld::String(block_type)), Some(Ipld::String(text)), Some(Ipld::String(link))) => {
                        format!("{kind} {block_type} {text} -> {link}")
                    }
                    _ => panic!("bad block"),
                },
                (_, Some(Ipld::List(blocks)), _) => format!("{kind} {}", blocks.len()),
                (.., Some(Ipld::List(attrs))) => format!("{kind} {}", attrs.len()),
                _ => kind.clone(),
            }
        })
        .collect()
}

#[tokio::test]
async fn publishing_creates_and_updates_documents_of_the_agents_own_account() {
    use seed_agents_protocol::generated::{CreateAgent, CreateSigningIdentity};
    let hm = FakeHm::start().await;
    let (server, owner, _) = start(&hm, false).await;
    let identity = owner
        .call(CreateSigningIdentity { client_request_id: None, label: Some("Ada".into()) })
        .await
        .unwrap()
        .identity;
    let account = identity.account_id.clone().unwrap();
    let mut def = definition("Publisher");
    def.signing_key = Some(identity.name.clone());
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    let session_id = owner.create_session(&agent_id, None).await;
    let (home, notes) = (format!("hm://{account}"), format!("hm://{account}/notes"));
    hm.answer("Resource", &[("id", &home)], json!({ "type": "document", "document": { "content": [] } }));
    hm.answer("Resource", &[("id", &notes)], json!({ "type": "not-found", "id": {} }));
    hm.answer("Resource", &[("id", &format!("{home}/a/b"))], json!({ "type": "not-found", "id": {} }));
    hm.answer("Resource", &[("id", &format!("{home}/a"))], json!({ "type": "not-found", "id": {} }));
    let before = hm.blobs().len();

    // A dry run signs but publishes nothing.
    let options = json!({ "name": "Field notes" });
    let mut dry = write(&session_id, &notes, Some("# Birds\n\nA heron."), options.clone());
    let Ipld::Map(fields) = &mut dry.input.0 else { unreachable!() };
    fields.insert("dryRun".into(), Ipld::Bool(true));
    let dry = output(&owner.call(dry).await.unwrap());
    assert_eq!(dry["dryRun"], true);
    assert_eq!(hm.blobs().len(), before);

    let created = output(&owner.call(write(&session_id, &notes, Some("# Birds\n\nA heron."), options)).await.unwrap());
    assert_eq!((created["action"].as_str(), created["id"].as_str()), (Some("document"), Some(notes.as_str())));
    assert_eq!(created["summary"], format!("Published {notes} (created)."));
    let blobs = hm.blobs();
    let [genesis, change, version_ref] = &blobs[before..] else { panic!("expected three blobs") };
    assert_eq!(genesis.integer("ts"), Some(0));
    assert_eq!(change.signer().as_deref(), Some(account.as_str()));
    assert_eq!(
        ops(change),
        ["SetAttributes 1", "ReplaceBlock Heading Birds", "ReplaceBlock Paragraph A heron.", "MoveBlocks 2"]
    );
    assert_eq!(created["version"], change.cid);
    assert_eq!((version_ref.text("type"), version_ref.text("path")), (Some("Ref"), Some("/notes")));

    // The parent must exist; an existing document needs `update`.
    let orphan = owner.call(write(&session_id, &format!("{home}/a/b"), Some("x"), json!({ "name": "B" }))).await;
    assert_eq!(orphan.unwrap().error.unwrap(), format!("The parent document {home}/a does not exist; create it first"));
    let old_block = "blockOld";
    hm.answer(
        "Resource",
        &[("id", &notes)],
        json!({ "type": "document", "document": { "content": [ { "block": { "id": old_block, "type": "Paragraph" } } ] } }),
    );
    let again = owner.call(write(&session_id, &notes, Some("x"), json!({ "name": "Again" }))).await.unwrap();
    assert_eq!(again.error.unwrap(), format!("{notes} already exists; use options.action \"update\""));

    // An update builds on the listed changes: depth 2, the old blocks replaced.
    hm.answer(
        "ListChanges",
        &[("targetId", &notes)],
        json!({ "changes": [ { "id": genesis.cid, "deps": [] }, { "id": change.cid, "deps": [genesis.cid] } ] }),
    );
    let updated = output(
        &owner.call(write(&session_id, &notes, Some("Herons only."), json!({ "action": "update" }))).await.unwrap(),
    );
    assert_eq!(updated["summary"], format!("Published {notes} (updated)."));
    let blobs = hm.blobs();
    let [next, next_ref] = &blobs[before + 3..] else { panic!("expected two blobs") };
    assert_eq!(next.integer("depth"), Some(2));
    assert_eq!(next.links("deps"), Some(vec![change.cid.clone()]));
    assert_eq!(ops(next), ["DeleteBlocks 1", "ReplaceBlock Paragraph Herons only.", "MoveBlocks 1"]);
    assert_eq!(next_ref.links("heads"), Some(vec![next.cid.clone()]));

    // What is not built says so; another account needs a capability; options are per action.
    let raw = owner.call(write(&session_id, &notes, Some("hi"), json!({ "action": "document.ref" }))).await;
    assert!(raw.unwrap().error.unwrap().starts_with("The raw publishing command document.ref is not supported"));
    hm.answer("ListCapabilities", &[("targetId", &format!("hm://{UID}"))], json!({ "capabilities": [] }));
    let foreign = owner.call(write(&session_id, &format!("hm://{UID}/x"), Some("hi"), json!({ "name": "X" }))).await;
    assert_eq!(
        foreign.unwrap().error.unwrap(),
        format!(
            "This agent signs as {account}, which holds no WRITER or AGENT capability on hm://{UID}; that account's \
             owner must grant one before the agent can publish there"
        )
    );
    let unknown = owner.call(write(&session_id, &notes, Some("hi"), json!({ "title": "X" }))).await.unwrap();
    assert_eq!(
        unknown.error.unwrap(),
        "write hm:// (action \"document\") does not understand option \"title\". Supported options: action, signer, \
         input, skipLinkCheck, name, metadata."
    );
    server.stop().await;
}

#[tokio::test]
async fn publishing_needs_the_grant_and_a_signing_key() {
    use seed_agents_protocol::generated::CreateAgent;
    let hm = FakeHm::start().await;
    let (server, owner, keyless_session) = start(&hm, false).await;
    let address = format!("hm://{UID}/notes");
    let keyless = owner.call(write(&keyless_session, &address, Some("hi"), json!({ "name": "N" }))).await.unwrap();
    assert_eq!(
        keyless.error.unwrap(),
        "This agent has no signing key; its owner can give it one (signingKeys) to publish"
    );
    let mut def = definition("Reader only");
    def.tools = Some(vec!["search".into()]);
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    let session_id = owner.create_session(&agent_id, None).await;
    let refused = owner.call(write(&session_id, &address, Some("hi"), json!({ "name": "N" }))).await.unwrap();
    assert!(refused.error.unwrap().starts_with("Publishing is not enabled for this agent."));
    assert_eq!(hm.requests(), 0);
    server.stop().await;
}

#[tokio::test]
async fn ipfs_writes_publish_memory_files_and_reads_download_them_back() {
    let hm = FakeHm::start().await;
    let (server, user, session_id) = start(&hm, false).await;
    let note = InvokeSessionTool {
        input: Value(
            wire::to_ipld(&json!({ "address": "~/memory/notes/hello.txt", "content": "hello world" })).unwrap(),
        ),
        session_id: session_id.clone(),
        verb: InvokeSessionToolVerb::Write,
    };
    assert_eq!(user.call(note).await.unwrap().error, None);
    let published = output(
        &user.call(write(&session_id, "ipfs://", None, json!({ "fromPath": "notes/hello.txt" }))).await.unwrap(),
    );
    // The UnixFS root of "hello world" (docs/hypermedia.md §3).
    let cid = "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e";
    assert_eq!((published["cid"].as_str(), published["size"].as_u64()), (Some(cid), Some(11)));
    assert_eq!(published["url"], format!("ipfs://{cid}"));

    let read_back = output(
        &user.call(read(&session_id, &format!("ipfs://{cid}"), Some(json!({ "path": "copy.txt" })))).await.unwrap(),
    );
    assert_eq!((read_back["path"].as_str(), read_back["content"].as_str()), (Some("copy.txt"), Some("hello world")));
    let missing =
        user.call(read(&session_id, "ipfs://bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku", None)).await;
    assert!(missing.unwrap().error.unwrap().contains("HTTP 404"));
    let invalid = user.call(read(&session_id, "ipfs://nope", None)).await.unwrap();
    assert_eq!(invalid.error.as_deref(), Some("Invalid CID: ipfs://nope"));
    let neither = user.call(write(&session_id, "ipfs://", None, json!({}))).await.unwrap();
    assert_eq!(
        neither.error.as_deref(),
        Some("write ipfs:// needs options.fromPath (a memory file) or options.fromAttachment")
    );

    // An attachment of the session publishes as the same UnixFS root as the same bytes in memory.
    let upload = UploadSessionAttachment {
        session_id: session_id.clone(),
        name: "hello.txt".into(),
        mime_type: None,
        content: Bytes(b"hello world".to_vec()),
    };
    let attachment = user.call(upload).await.unwrap().attachment;
    let before = hm.requests();
    let options = json!({ "fromAttachment": attachment.id });
    let published = output(&user.call(write(&session_id, "ipfs://", None, options)).await.unwrap());
    assert_eq!((published["cid"].as_str(), published["size"].as_u64()), (Some(cid), Some(11)));
    assert_eq!(published["url"], format!("ipfs://{cid}"));
    assert_eq!((published["id"].as_str(), published["name"].as_str()), (Some(&*attachment.id), Some("hello.txt")));
    assert_eq!(published["mimeType"], "text/plain");
    assert!(published.get("path").is_none(), "no memory path: {published}");
    assert!(hm.requests() > before, "the blocks went to the Hypermedia server");
    // Attachments are private to their session; refusals publish nothing.
    let other = user.create_session(&user.create_agent("Other").await, None).await;
    let refusals = [
        (&other, json!({ "fromAttachment": attachment.id }), format!("Attachment not found: {}", attachment.id)),
        (&session_id, json!({ "fromAttachment": "nope" }), "Invalid attachment id: nope".to_owned()),
        (
            &session_id,
            json!({ "fromAttachment": attachment.id, "fromPath": "notes/hello.txt" }),
            "write ipfs:// takes options.fromPath or options.fromAttachment, not both".to_owned(),
        ),
    ];
    let before = hm.requests();
    for (session, options, error) in refusals {
        let refused = user.call(write(session, "ipfs://", None, options)).await.unwrap();
        assert_eq!(refused.error.as_deref(), Some(&*error));
    }
    assert_eq!(hm.requests(), before);
    server.stop().await;
}
