//! `write hm://…` beyond creating documents: comments and replies, delete, redirect, move, fork,
//! publishing a memory file (`options.fromPath`), the raw commands (comment edits, the profile,
//! contacts, drafts written, revised and published), and writing another account's documents through a capability. User verbs
//! (`InvokeSessionTool`) against the fake Hypermedia server, which checks every blob's
//! signature, fields and links as the real server would (`support::hm`). Reads of documents are
//! scripted from what was actually published; comment reads come from the published Comments.

use ed25519_dalek::SigningKey;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Principal;
use seed_agents_protocol::generated::{CreateAgent, CreateSigningIdentity};
use seed_agents_server::testing::hm::capability::{self, NewCapability, Role};
use seed_agents_server::testing::hm::{Blob, blob, document};
use serde_json::{Value as Json, json};

use crate::hypermedia::{ops, output, start, write};
use crate::support::db::read_db;
use crate::support::hm::{FakeHm, Published, comment_record_id};
use crate::support::{TestServer, User, definition};

/// An owner with a signing identity, an agent that signs with it, and a session of that agent.
struct Publisher {
    server: TestServer,
    owner: User,
    session_id: seed_agents_protocol::SessionId,
    agent_id: seed_agents_protocol::AgentId,
    account: String,
}

async fn publisher(hm: &FakeHm) -> Publisher {
    let (server, owner, _) = start(hm, false).await;
    let identity = owner
        .call(CreateSigningIdentity { client_request_id: None, label: Some("Ada".into()) })
        .await
        .unwrap()
        .identity;
    let mut def = definition("Publisher");
    def.signing_key = Some(identity.name.clone());
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    let session_id = owner.create_session(&agent_id, None).await;
    Publisher { server, owner, session_id, agent_id, account: identity.account_id.unwrap().into_string() }
}

/// A published document: its genesis, its change (the version) and its Ref's generation.
#[derive(Clone)]
struct Doc {
    genesis: String,
    version: String,
    generation: i128,
}

impl Doc {
    /// The `Resource` answer for it at `hm://<account><path>`.
    fn resource(&self, account: &str, path: &str, visibility: &str) -> Json {
        json!({
            "type": "document",
            "id": { "id": format!("hm://{account}{path}"), "uid": account },
            "document": {
                "account": account, "path": path, "version": self.version, "genesis": self.genesis,
                "generationInfo": { "genesis": self.genesis, "generation": self.generation.to_string() },
                "visibility": visibility, "metadata": { "name": "Doc" }, "content": [],
            }
        })
    }
}

/// The document of the last three published blobs (genesis, change, version Ref).
fn last_document(hm: &FakeHm) -> Doc {
    let blobs = hm.blobs();
    let [genesis, change, version_ref] = &blobs[blobs.len() - 3..] else { unreachable!() };
    assert_eq!(version_ref.text("type"), Some("Ref"));
    Doc {
        genesis: genesis.cid.clone(),
        version: change.cid.clone(),
        generation: version_ref.integer("generation").unwrap(),
    }
}

/// Publishes a document at `path` through the agent and scripts `Resource` to answer it.
async fn create(hm: &FakeHm, p: &Publisher, path: &str) -> Doc {
    let id = format!("hm://{}{path}", p.account);
    hm.answer("Resource", &[("id", &id)], json!({ "type": "not-found", "id": {} }));
    let created = p.owner.call(write(&p.session_id, &id, Some("# Birds\n\nA heron."), json!({ "name": "Doc" }))).await;
    assert_eq!(output(&created.unwrap())["action"], "document");
    let doc = last_document(hm);
    hm.answer("Resource", &[("id", &id)], doc.resource(&p.account, path, "PUBLIC"));
    doc
}

fn not_found(hm: &FakeHm, id: &str) {
    hm.answer("Resource", &[("id", id)], json!({ "type": "not-found", "id": {} }));
}

fn error(
    response: Result<seed_agents_protocol::generated::InvokeSessionToolResponse, seed_agents_sdk::Error>,
) -> String {
    let response = response.unwrap();
    response.error.unwrap_or_else(|| panic!("expected an error, got {:?}", response.output))
}

fn texts(blob: &Published, key: &str) -> Vec<String> {
    let Some(Ipld::List(items)) = blob.field(key) else { panic!("{key} is not a list") };
    items
        .iter()
        .map(|item| {
            let Ipld::Map(item) = item else { panic!("not a map") };
            match (item.get("type"), item.get("text")) {
                (Some(Ipld::String(kind)), Some(Ipld::String(text))) => format!("{kind} {text}"),
                _ => panic!("a block without type and text"),
            }
        })
        .collect()
}

fn principal_bytes(account: &str) -> Ipld {
    Ipld::Bytes(account.parse::<Principal>().unwrap().to_bytes().to_vec())
}

#[tokio::test]
async fn comments_and_replies_publish_signed_comment_blobs() {
    let hm = FakeHm::start().await;
    let p = publisher(&hm).await;
    let (owner, session) = (&p.owner, p.session_id.as_str());
    let notes = format!("hm://{}/notes", p.account);
    let doc = create(&hm, &p, "/notes").await;
    let comment = |content: Option<&str>, options: Json| {
        let mut options = options;
        options["action"] = json!("comment");
        write(session, &notes, content, options)
    };

    // A comment on the document's current version; its hm:// link is checked and exists.
    let before = hm.blobs().len();
    let content = format!("Nice **heron**.\n\nSee [the list]({notes}).");
    let first = output(&owner.call(comment(Some(&content), json!({}))).await.unwrap());
    let blobs = hm.blobs();
    let [published] = &blobs[before..] else { panic!("expected one blob") };
    assert_eq!(published.text("type"), Some("Comment"));
    assert_eq!(published.field("space"), Some(&principal_bytes(&p.account)));
    assert_eq!(published.text("path"), Some("/notes"));
    assert_eq!(published.links("version"), Some(vec![doc.version.clone()]));
    assert_eq!(
        texts(published, "body"),
        ["Paragraph Nice **heron**.", format!("Paragraph See [the list]({notes}).").as_str()]
    );
    assert_eq!((published.field("replyParent"), published.field("visibility")), (None, None));
    // The record id is the one the fake computes from the bytes; the CID is the server's.
    let first_id = comment_record_id(published).unwrap();
    assert!(first_id.starts_with(&format!("{}/z", p.account)));
    assert_eq!(first["commentId"], first_id);
    assert_eq!(first["id"], format!("hm://{first_id}"));
    assert_eq!(first["version"], published.cid);
    assert!(published.cid.starts_with("bafy2bza"));
    assert_eq!(first["target"], notes);
    assert_eq!(first["summary"], format!("Commented on {notes} (comment hm://{first_id})."));
    let first_cid = published.cid.clone();

    // A reply reads its parent (`Comment`) and links it as parent and thread root; a reply to
    // the reply keeps the thread root.
    let reply = output(&owner.call(comment(Some("Agreed."), json!({ "replyTo": first["id"] }))).await.unwrap());
    let second = hm.blobs().last().cloned().unwrap();
    assert_eq!(
        (second.link("replyParent"), second.link("threadRoot")),
        (Some(first_cid.clone()), Some(first_cid.clone()))
    );
    assert_eq!(reply["replyTo"], first_id);
    let deeper = owner.call(comment(Some("Me too."), json!({ "replyTo": reply["commentId"] }))).await.unwrap();
    output(&deeper);
    let third = hm.blobs().last().cloned().unwrap();
    assert_eq!((third.link("replyParent"), third.link("threadRoot")), (Some(second.cid.clone()), Some(first_cid)));
    assert!(hm.queries().iter().any(|(key, params)| key == "Comment" && params["__value"] == first_id));

    // A reply goes to its parent's document; a comment needs content and a document.
    let elsewhere = format!("hm://{}/other", p.account);
    let misplaced = comment(Some("x"), json!({ "replyTo": first_id, "target": elsewhere }));
    assert_eq!(
        error(owner.call(misplaced).await),
        format!("Comment {first_id} is on {notes}, not on {elsewhere}; write the reply to {notes}")
    );
    assert_eq!(
        error(owner.call(comment(None, json!({}))).await),
        "write hm:// with action comment needs content (the comment's markdown)"
    );
    not_found(&hm, &elsewhere);
    assert_eq!(
        error(owner.call(comment(Some("x"), json!({ "target": elsewhere }))).await),
        format!("Comment target {elsewhere} does not exist")
    );
    let unknown_parent = format!("{}/zNoSuchTsid", p.account);
    assert!(error(owner.call(comment(Some("x"), json!({ "replyTo": unknown_parent }))).await).contains("not found"));

    // Links: malformed ones are always refused; missing ones unless skipLinkCheck.
    let missing = format!("hm://{}/missing", p.account);
    not_found(&hm, &missing);
    let broken = format!("Read [this]({missing}).");
    assert_eq!(
        error(owner.call(comment(Some(&broken), json!({}))).await),
        format!(
            "Content links to hm:// resources that do not exist on the server: {missing}. Fix the links (read them \
             to verify), or pass options.skipLinkCheck: true only if the targets are about to be created."
        )
    );
    let skipped = owner.call(comment(Some(&broken), json!({ "skipLinkCheck": true }))).await.unwrap();
    assert_eq!(output(&skipped)["action"], "comment");
    let malformed = comment(Some("See <hm://my-doc/notes>."), json!({ "skipLinkCheck": true }));
    assert_eq!(
        error(owner.call(malformed).await),
        "Content contains malformed hm:// links — fix or remove them before publishing: hm://my-doc/notes"
    );
    assert_eq!(
        error(owner.call(comment(Some("x"), json!({ "toPath": "/a" }))).await),
        "write hm:// (action \"comment\") does not understand option \"toPath\". Supported options: action, signer, \
         input, skipLinkCheck, target, replyTo."
    );

    // A dry run publishes nothing; a comment on a private document is private.
    let published = hm.blobs().len();
    let mut dry = comment(Some("Draft."), json!({}));
    let Ipld::Map(fields) = &mut dry.input.0 else { unreachable!() };
    fields.insert("dryRun".into(), Ipld::Bool(true));
    let dry = output(&owner.call(dry).await.unwrap());
    assert_eq!((dry["dryRun"].clone(), dry.get("commentId")), (json!(true), None));
    assert_eq!(hm.blobs().len(), published);
    hm.answer("Resource", &[("id", &notes)], doc.resource(&p.account, "/notes", "PRIVATE"));
    output(&owner.call(comment(Some("Quietly."), json!({}))).await.unwrap());
    assert_eq!(hm.blobs().last().unwrap().text("visibility"), Some("Private"));
    p.server.stop().await;
}

#[tokio::test]
async fn delete_redirect_move_and_fork_publish_refs() {
    let hm = FakeHm::start().await;
    let p = publisher(&hm).await;
    let (owner, session, account) = (&p.owner, p.session_id.as_str(), p.account.as_str());
    let id = |path: &str| format!("hm://{account}{path}");
    let act = |address: &str, options: Json| write(session, address, None, options);
    let notes = id("/notes");
    let doc = create(&hm, &p, "/notes").await;
    let genesis = Some(doc.genesis.clone());

    // redirect: to an existing document (unless skipLinkCheck), never to itself.
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "redirect" }))).await),
        "write hm:// with action redirect needs options.toUrl (the hm:// document to send readers to)"
    );
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "redirect", "toUrl": notes }))).await),
        format!("{notes} cannot redirect to itself")
    );
    not_found(&hm, &id("/birds"));
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "redirect", "toUrl": id("/birds") }))).await),
        format!(
            "The redirect target {} does not exist on the server; pass options.skipLinkCheck: true only if it is \
             about to be created",
            id("/birds")
        )
    );
    let before = hm.blobs().len();
    let options =
        json!({ "action": "redirect", "toUrl": id("/birds"), "skipLinkCheck": true, "input": { "republish": true } });
    let redirected = output(&owner.call(act(&notes, options)).await.unwrap());
    assert_eq!(redirected["summary"], format!("{notes} now redirects to {}.", id("/birds")));
    let redirect = hm.blobs()[before].clone();
    assert_eq!((redirect.text("path"), redirect.link("genesisBlob")), (Some("/notes"), genesis.clone()));
    assert_eq!((redirect.links("heads"), redirect.integer("generation")), (Some(vec![]), Some(doc.generation)));
    assert_eq!(
        redirect.field("redirect"),
        Some(&Ipld::Map(
            [("path".to_owned(), Ipld::String("/birds".into())), ("republish".to_owned(), Ipld::Bool(true))].into()
        ))
    );
    assert_eq!(redirected["cids"], json!([redirect.cid]));

    // move: a version Ref at the new path and a redirect from the old one, in one request.
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "move" }))).await),
        "write hm:// with action move needs options.toPath (the new path, \"/\" for the account home)"
    );
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "move", "toPath": "notes" }))).await),
        format!("The document is already at {notes}")
    );
    not_found(&hm, &id("/archive"));
    not_found(&hm, &id("/archive/notes"));
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "move", "toPath": "/archive/notes" }))).await),
        format!("The parent document {} does not exist; create it first", id("/archive"))
    );
    let other = create(&hm, &p, "/taken").await;
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "move", "toPath": "/taken" }))).await),
        format!("{} already exists; move to a free path", id("/taken"))
    );
    not_found(&hm, &id("/moved"));
    let (before, requests, reads) = (hm.blobs().len(), hm.requests(), hm.queries().len());
    let moved = output(&owner.call(act(&notes, json!({ "action": "move", "toPath": "/moved" }))).await.unwrap());
    assert_eq!((moved["id"].as_str(), moved["source"].as_str()), (Some(id("/moved").as_str()), Some(notes.as_str())));
    let blobs = hm.blobs();
    let [placed, left] = &blobs[before..] else { panic!("expected two blobs") };
    assert_eq!((placed.text("path"), placed.links("heads")), (Some("/moved"), Some(vec![doc.version.clone()])));
    assert_eq!((placed.link("genesisBlob"), placed.integer("generation")), (genesis.clone(), Some(doc.generation)));
    assert_eq!((left.text("path"), left.links("heads")), (Some("/notes"), Some(vec![])));
    let Some(Ipld::Map(target)) = left.field("redirect") else { panic!("no redirect") };
    assert_eq!(target.get("path"), Some(&Ipld::String("/moved".into())));
    // Reads first, then both Refs in one PublishBlobs.
    assert_eq!((hm.requests() - requests) - (hm.queries().len() - reads), 1);
    assert_eq!(moved["cids"], json!([placed.cid, left.cid]));

    // fork: the source's version (given with ?v=) at a free path.
    assert_eq!(
        error(owner.call(act(&id("/copy"), json!({ "action": "fork" }))).await),
        "write hm:// with action fork needs options.fromUrl (the hm:// document to copy)"
    );
    assert_eq!(
        error(owner.call(act(&id("/taken"), json!({ "action": "fork", "fromUrl": notes }))).await),
        format!("{} already exists; fork to a free path", id("/taken"))
    );
    let versioned = format!("{}?v={}", id("/taken"), other.version);
    hm.answer("Resource", &[("id", &versioned)], other.resource(account, "/taken", "PUBLIC"));
    not_found(&hm, &id("/copy"));
    let before = hm.blobs().len();
    let forked =
        output(&owner.call(act(&id("/copy"), json!({ "action": "fork", "fromUrl": versioned }))).await.unwrap());
    assert_eq!(
        (forked["source"].as_str(), forked["version"].as_str()),
        (Some(id("/taken").as_str()), Some(other.version.as_str()))
    );
    let blobs = hm.blobs();
    let [copy] = &blobs[before..] else { panic!("expected one blob") };
    assert_eq!((copy.text("path"), copy.links("heads")), (Some("/copy"), Some(vec![other.version.clone()])));
    assert_eq!(copy.link("genesisBlob"), Some(other.genesis.clone()));

    // delete: a tombstone; only documents; options are per action; dry runs publish nothing.
    assert_eq!(
        error(owner.call(act(&id("/moved"), json!({ "action": "delete" }))).await),
        format!("No document at {} to delete", id("/moved"))
    );
    assert_eq!(
        error(owner.call(act(&notes, json!({ "action": "delete", "toPath": "/x" }))).await),
        "write hm:// (action \"delete\") does not understand option \"toPath\". Supported options: action, signer, \
         input, skipLinkCheck."
    );
    let before = hm.blobs().len();
    let mut dry = act(&notes, json!({ "action": "delete" }));
    let Ipld::Map(fields) = &mut dry.input.0 else { unreachable!() };
    fields.insert("dryRun".into(), Ipld::Bool(true));
    let dry = output(&owner.call(dry).await.unwrap());
    assert_eq!(dry["summary"], format!("Dry run: delete {notes} would publish 1 blob; nothing was published."));
    assert_eq!(hm.blobs().len(), before);
    let deleted = output(&owner.call(act(&notes, json!({ "action": "delete" }))).await.unwrap());
    assert_eq!(deleted["summary"], format!("Deleted {notes}."));
    let blobs = hm.blobs();
    let [tombstone] = &blobs[before..] else { panic!("expected one blob") };
    assert_eq!((tombstone.text("type"), tombstone.links("heads")), (Some("Ref"), Some(vec![])));
    assert_eq!((tombstone.field("redirect"), tombstone.link("genesisBlob")), (None, genesis));
    assert_eq!(tombstone.integer("generation"), Some(doc.generation));
    p.server.stop().await;
}

#[tokio::test]
async fn writing_another_accounts_documents_needs_its_capability() {
    let hm = FakeHm::start().await;
    let p = publisher(&hm).await;
    let (owner, session) = (&p.owner, p.session_id.as_str());
    // Bea's key is the test's: her document and the capability she grants the agent's account.
    let bea = SigningKey::from_bytes(&[9; 32]);
    let bea_account = blob::principal(&bea).to_string();
    let shared = format!("hm://{bea_account}/shared");
    let new = document::new_document(
        &bea,
        1_700_000_000_000,
        blob::principal(&bea),
        "/shared",
        &document::new_document_ops("Shared", Vec::new()),
    )
    .unwrap();
    let (genesis_cid, change_cid) = (new.genesis.cid.to_string(), new.change.cid.to_string());
    hm.store(&new.into_blobs().iter().collect::<Vec<_>>()).unwrap();
    let doc = Doc { genesis: genesis_cid.clone(), version: change_cid.clone(), generation: 1_700_000_000_000 };
    hm.answer("Resource", &[("id", &shared)], doc.resource(&bea_account, "/shared", "PUBLIC"));
    hm.answer(
        "ListChanges",
        &[("targetId", &shared)],
        json!({ "changes": [ { "id": genesis_cid, "deps": [] }, { "id": change_cid, "deps": [genesis_cid] } ] }),
    );
    let listing = |capabilities: Json| {
        hm.answer(
            "ListCapabilities",
            &[("targetId", &format!("hm://{bea_account}"))],
            json!({ "capabilities": capabilities }),
        )
    };
    let update = || write(session, &shared, Some("Agent notes."), json!({ "action": "update" }));

    // No capability: refused before anything is signed or sent.
    listing(
        json!([ { "id": "bafyreiasesgveuikkpa7pspmqrdwzl5jsfbppvmaeczw2dfz5cc5vh3rou", "delegate": p.account, "role": "READER" } ]),
    );
    let before = hm.blobs().len();
    assert!(error(owner.call(update()).await).contains("holds no WRITER or AGENT capability"));
    assert_eq!(hm.blobs().len(), before);

    // Bea grants WRITER: the update's Ref names her space and links the capability.
    let grant = NewCapability {
        ts_ms: 1_700_000_000_001,
        delegate: p.account.parse().unwrap(),
        role: Role::Writer,
        path: None,
        label: None,
    };
    let capability = capability::capability(&bea, &grant).unwrap();
    let capability_cid = hm.store(&[&capability]).unwrap().remove(0);
    listing(json!([ { "id": capability_cid, "delegate": p.account, "role": "WRITER", "issuer": bea_account } ]));
    let updated = output(&owner.call(update()).await.unwrap());
    assert_eq!(updated["summary"], format!("Published {shared} (updated)."));
    let blobs = hm.blobs();
    let [change, version_ref] = &blobs[blobs.len() - 2..] else { unreachable!() };
    assert_eq!(change.signer().as_deref(), Some(p.account.as_str()));
    assert_eq!(ops(change), ["ReplaceBlock Paragraph Agent notes.", "MoveBlocks 1"]);
    assert_eq!(version_ref.field("space"), Some(&principal_bytes(&bea_account)));
    assert_eq!(version_ref.link("capability"), Some(capability_cid.clone()));

    // The same capability covers a delete; comments need none.
    output(&owner.call(write(session, &shared, None, json!({ "action": "delete" }))).await.unwrap());
    assert_eq!(hm.blobs().last().unwrap().link("capability"), Some(capability_cid));
    p.server.stop().await;
}

#[tokio::test]
async fn a_model_turn_replies_to_a_comment_with_the_write_tool() {
    use crate::support::custom_provider_config;
    use crate::support::provider::{Provider, Script};
    use seed_agents_protocol::generated::{
        MessageSession, MessageSessionContentPart, SetModelProvider, TextContentPart,
    };
    use seed_agents_server::testing::hm::comment::{NewComment, comment};
    use seed_agents_server::testing::hm::document::TextBlock;

    let hm = FakeHm::start().await;
    let provider = Provider::start().await;
    let url = hm.url.clone();
    let server = TestServer::start_with(tempfile::tempdir().unwrap(), move |config| {
        config.hm_server_url = url;
        config.session_title_generation = false;
    })
    .await;
    let owner = server.user();
    owner
        .call(SetModelProvider { name: "main".into(), provider: custom_provider_config(provider.openai_base()) })
        .await
        .unwrap();
    let identity = owner
        .call(CreateSigningIdentity { client_request_id: None, label: Some("Ada".into()) })
        .await
        .unwrap()
        .identity;
    let account = identity.account_id.unwrap().into_string();
    let mut def = definition("Replier");
    def.signing_key = Some(identity.name.clone());
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    let session_id = owner.create_session(&agent_id, None).await;

    // Bea's post and her comment on it, published by the test.
    let bea = SigningKey::from_bytes(&[9; 32]);
    let bea_account = blob::principal(&bea).to_string();
    let post = format!("hm://{bea_account}/post");
    let ops = document::new_document_ops("Post", Vec::new());
    let new = document::new_document(&bea, 1_700_000_000_000, blob::principal(&bea), "/post", &ops).unwrap();
    let doc = Doc {
        genesis: new.genesis.cid.to_string(),
        version: new.change.cid.to_string(),
        generation: 1_700_000_000_000,
    };
    let body =
        [TextBlock { kind: "Paragraph".into(), id: "q1".into(), text: "Anyone seen a heron?".into(), link: None }];
    let question = comment(
        &bea,
        &NewComment {
            ts_ms: 1_700_000_000_500,
            space: blob::principal(&bea),
            path: "/post",
            version: &[new.change.cid],
            body: &body,
            reply_parent: None,
            thread_root: None,
            private: false,
            edits: None,
        },
    )
    .unwrap();
    let mut blobs: Vec<Blob> = new.into_blobs().to_vec();
    blobs.push(question.blob.clone());
    let cids = hm.store(&blobs.iter().collect::<Vec<_>>()).unwrap();
    hm.answer("Resource", &[("id", &post)], doc.resource(&bea_account, "/post", "PUBLIC"));

    // The model answers as the trigger prompt asks: write a comment replying to hers.
    let arguments = json!({
        "address": post,
        "content": "Yes, one by the pond this morning.",
        "options": { "action": "comment", "replyTo": format!("hm://{}", question.id) },
    });
    provider.push(Script::tool_call("call_1", "write", &arguments.to_string()).split());
    provider.push(Script::text("Replied."));
    let text = TextContentPart {
        extra: Default::default(),
        blocks: None,
        client_message_id: None,
        text: "Bea asked about herons on her post; answer her.".into(),
    };
    let message = MessageSession {
        client_message_id: None,
        content: vec![MessageSessionContentPart::TextContentPart(text)],
        session_id: session_id.clone(),
    };
    owner.call(message).await.unwrap();

    let reply = hm.blobs().last().cloned().unwrap();
    assert_eq!((reply.text("type"), reply.signer()), (Some("Comment"), Some(account.clone())));
    assert_eq!(reply.field("space"), Some(&principal_bytes(&bea_account)));
    assert_eq!((reply.link("replyParent"), reply.link("threadRoot")), (Some(cids[3].clone()), Some(cids[3].clone())));
    assert_eq!(texts(&reply, "body"), ["Paragraph Yes, one by the pond this morning."]);
    let second = &provider.requests()[1].body["messages"];
    let tool = second.as_array().unwrap().iter().find(|message| message["role"] == "tool").unwrap();
    let result: Json = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["commentId"], comment_record_id(&reply).unwrap());
    assert_eq!(result["replyTo"], question.id);
    server.stop().await;
}

#[tokio::test]
async fn an_agent_grants_a_capability_that_lets_another_account_write() {
    let hm = FakeHm::start().await;
    let p = publisher(&hm).await;
    let (owner, session) = (&p.owner, p.session_id.as_str());
    let doc = create(&hm, &p, "/notes").await;
    let bea = SigningKey::from_bytes(&[9; 32]);
    let bea_account = blob::principal(&bea).to_string();
    let home = format!("hm://{}", p.account);
    let grant = |address: &str, input: Json| {
        write(session, address, None, json!({ "action": "capability.grant", "input": input }))
    };

    assert_eq!(
        error(owner.call(grant(&home, json!({ "role": "WRITER" }))).await),
        "Capability delegate is required (options.input.delegate, an account id)"
    );
    assert_eq!(
        error(owner.call(grant(&home, json!({ "delegate": bea_account, "role": "READER" }))).await),
        "Capability role must be WRITER or AGENT"
    );
    let foreign = format!("hm://{bea_account}");
    assert!(
        error(owner.call(grant(&foreign, json!({ "delegate": p.account, "role": "WRITER" }))).await)
            .contains("it can only grant capabilities on")
    );
    let named = write(session, &home, None, json!({ "action": "capability.create", "name": "x" }));
    assert!(
        error(owner.call(named).await)
            .starts_with("write hm:// (action \"capability.create\") does not understand option \"name\"")
    );
    let other = write(session, &home, None, json!({ "action": "document.ref" }));
    assert!(error(owner.call(other).await).starts_with("The raw publishing command document.ref is not supported"));

    let before = hm.blobs().len();
    let input = json!({ "delegate": format!("hm://{bea_account}"), "role": "writer", "label": "Bea" });
    let granted = output(&owner.call(grant(&home, input)).await.unwrap());
    assert_eq!(granted["summary"], format!("Granted {bea_account} WRITER on {home}."));
    let blobs = hm.blobs();
    let [published] = &blobs[before..] else { panic!("expected one blob") };
    assert_eq!((published.text("type"), published.text("role")), (Some("Capability"), Some("WRITER")));
    assert_eq!(
        (published.field("delegate"), published.text("label")),
        (Some(&principal_bytes(&bea_account)), Some("Bea"))
    );
    assert_eq!((published.field("path"), published.signer()), (None, Some(p.account.clone())));
    assert_eq!(granted["cids"], json!([published.cid]));

    // Bea can now delete the agent's document: the fake follows her Ref to the capability.
    let genesis: ipld_core::cid::Cid = doc.genesis.parse().unwrap();
    let mut tombstone = document::VersionRef {
        ts_ms: 1_800_000_000_000,
        space: p.account.parse().unwrap(),
        path: "/notes",
        genesis: &genesis,
        heads: &[],
        generation: 1,
        capability: None,
    };
    let unauthorised = document::reference(&bea, &tombstone, document::RefTarget::Tombstone).unwrap();
    assert!(hm.store(&[&unauthorised]).unwrap_err().contains("without a capability"));
    tombstone.capability = Some(published.cid.parse().unwrap());
    hm.store(&[&document::reference(&bea, &tombstone, document::RefTarget::Tombstone).unwrap()]).unwrap();

    // A capability on a path covers the documents under it only.
    let granted = owner.call(grant(&format!("{home}/team"), json!({ "delegate": bea_account, "role": "AGENT" }))).await;
    let scoped = hm.blobs().last().cloned().unwrap();
    assert_eq!((output(&granted.unwrap())["role"].as_str(), scoped.text("path")), (Some("AGENT"), Some("/team")));
    tombstone.capability = Some(scoped.cid.parse().unwrap());
    let outside = document::reference(&bea, &tombstone, document::RefTarget::Tombstone).unwrap();
    assert!(hm.store(&[&outside]).unwrap_err().contains("covers /team, not /notes"));
    tombstone.path = "/team/notes";
    hm.store(&[&document::reference(&bea, &tombstone, document::RefTarget::Tombstone).unwrap()]).unwrap();
    p.server.stop().await;
}

/// Writes `text` to the agent's memory at `path` (as the user, through the `write` verb).
async fn remember(p: &Publisher, path: &str, text: &str) {
    let address = format!("~/memory/{path}");
    let written = p.owner.call(write(&p.session_id, &address, Some(text), json!({}))).await.unwrap();
    assert_eq!(written.error, None, "{address}");
}

#[tokio::test]
async fn a_memory_file_is_published_with_its_frontmatter_then_updated_in_place() {
    let hm = FakeHm::start().await;
    let p = publisher(&hm).await;
    let (owner, session, account) = (&p.owner, p.session_id.as_str(), p.account.as_str());
    let file = "~/memory/notes/weekly-update.md";
    remember(
        &p,
        "notes/weekly-update.md",
        "---\ntitle: Weekly update\nsummary: \"Herons: 3\"\n---\n# Birds\n\nA heron.\n",
    )
    .await;
    let home = format!("hm://{account}");
    let target = format!("{home}/weekly-update");
    not_found(&hm, &target);
    let before = hm.blobs().len();

    // The account's home address: the path comes from the frontmatter's title.
    let created = output(&owner.call(write(session, &home, None, json!({ "fromPath": file }))).await.unwrap());
    assert_eq!(created["summary"], format!("Published {file} as {target}."));
    assert_eq!(
        (created["action"].as_str(), created["id"].as_str(), created["memoryPath"].as_str()),
        (Some("document"), Some(target.as_str()), Some(file))
    );
    let blobs = hm.blobs();
    let [genesis, change, version_ref] = &blobs[before..] else { panic!("expected three blobs") };
    assert_eq!(
        ops(change),
        ["SetAttributes 2", "ReplaceBlock Heading Birds", "ReplaceBlock Paragraph A heron.", "MoveBlocks 2"]
    );
    let Some(Ipld::Map(body)) = change.field("body") else { panic!("no body") };
    let Some(Ipld::List(ops_list)) = body.get("ops") else { panic!("no ops") };
    let attributes = format!("{:?}", ops_list[0]);
    assert!(attributes.contains("Weekly update") && attributes.contains("Herons: 3"), "{attributes}");
    assert_eq!((version_ref.text("path"), created["version"].as_str()), (Some("/weekly-update"), Some(&*change.cid)));

    // Published again (now that it exists, at its own address): an update on the listed changes.
    let doc = last_document(&hm);
    hm.answer("Resource", &[("id", &target)], doc.resource(account, "/weekly-update", "PUBLIC"));
    hm.answer(
        "ListChanges",
        &[("targetId", &target)],
        json!({ "changes": [ { "id": genesis.cid, "deps": [] }, { "id": change.cid, "deps": [genesis.cid] } ] }),
    );
    remember(&p, "notes/weekly-update.md", "---\nname: Weekly update\n---\nFour herons.\n").await;
    let updated = output(
        &owner.call(write(session, &target, None, json!({ "fromPath": "notes/weekly-update.md" }))).await.unwrap(),
    );
    assert_eq!(updated["summary"], format!("Updated {target} from {file}."));
    assert_eq!(updated["action"], "update");
    let blobs = hm.blobs();
    let [next, _] = &blobs[before + 3..] else { panic!("expected two blobs") };
    assert_eq!(next.integer("depth"), Some(2));
    assert_eq!(ops(next), ["SetAttributes 1", "ReplaceBlock Paragraph Four herons.", "MoveBlocks 1"]);

    // Images in memory (relative to the file, or ~/memory/…) are published to IPFS first and the
    // document links their ipfs:// URLs; a missing one is refused before anything is sent.
    let published = hm.blobs().len();
    let chart = "---\nname: Chart\nicon: ../pics/me.png\n---\n![Q3](charts/q3.png \"Q3\")\n\nAgain: \
                 ![again](<~/memory/notes/charts/q3.png>).\n\n```\n![code](nowhere.png)\n```\n";
    remember(&p, "notes/chart.md", chart).await;
    assert_eq!(
        error(owner.call(write(session, &home, None, json!({ "fromPath": "notes/chart.md" }))).await),
        "~/memory/notes/chart.md: an image of the document: Memory file not found: pics/me.png"
    );
    assert_eq!(hm.blobs().len(), published);
    remember(&p, "pics/me.png", "a face").await;
    remember(&p, "notes/charts/q3.png", "a chart").await;
    not_found(&hm, &format!("{home}/chart"));
    // A dry run computes the same URLs and sends nothing.
    let mut dry = write(session, &home, None, json!({ "fromPath": "notes/chart.md" }));
    let Ipld::Map(fields) = &mut dry.input.0 else { unreachable!() };
    fields.insert("dryRun".into(), Ipld::Bool(true));
    let dry = output(&owner.call(dry).await.unwrap());
    assert_eq!((dry["dryRun"].clone(), hm.blobs().len()), (json!(true), published), "a dry run sends no image");
    let charted =
        output(&owner.call(write(session, &home, None, json!({ "fromPath": "notes/chart.md" }))).await.unwrap());
    let (me, q3) = (
        charted["images"]["~/memory/pics/me.png"].as_str().unwrap().to_owned(),
        charted["images"]["~/memory/notes/charts/q3.png"].as_str().unwrap().to_owned(),
    );
    let blobs = hm.blobs();
    let files: Vec<String> = blobs[published..]
        .iter()
        .filter(|blob| blob.codec == 0x55)
        .map(|blob| format!("ipfs://{}", blob.cid))
        .collect();
    assert_eq!(files, [me.clone(), q3.clone()], "each image once, before the document");
    assert_eq!(dry["images"], charted["images"]);
    let change = blobs[published..].iter().find(|blob| blob.field("body").is_some()).unwrap();
    assert_eq!(
        ops(change),
        [
            "SetAttributes 2".to_owned(),
            format!("ReplaceBlock Image Q3 -> {q3}"),
            format!("ReplaceBlock Paragraph Again: ![again](<{q3}>)."),
            "ReplaceBlock Code ![code](nowhere.png)".to_owned(),
            "MoveBlocks 3".to_owned(),
        ]
    );
    let Some(Ipld::Map(body)) = change.field("body") else { panic!("no body") };
    let Some(Ipld::List(ops_list)) = body.get("ops") else { panic!("no ops") };
    assert!(format!("{:?}", ops_list[0]).contains(&me), "the icon links the published image");

    // What cannot be published says why, and publishes nothing.
    let published = hm.blobs().len();
    remember(&p, "notes/escape.md", "![x](../../secret.png)\n").await;
    assert_eq!(
        error(owner.call(write(session, &home, None, json!({ "fromPath": "notes/escape.md" }))).await),
        "~/memory/notes/escape.md: the image ../../secret.png is outside memory"
    );
    remember(&p, "notes/tags.md", "---\nname: Tags\ntags:\n  - birds\n---\nx\n").await;
    assert!(
        error(owner.call(write(session, &home, None, json!({ "fromPath": "notes/tags.md" }))).await)
            .starts_with("~/memory/notes/tags.md: frontmatter line 3 (tags:) is not a key: value pair")
    );
    assert_eq!(
        error(owner.call(write(session, &home, None, json!({ "fromPath": "notes/missing.md" }))).await),
        "Memory file not found: notes/missing.md"
    );
    assert_eq!(
        error(owner.call(write(session, &home, None, json!({ "fromPath": file, "name": "X" }))).await),
        "write hm:// (fromPath) does not understand option \"name\". Supported options: fromPath, signer."
    );
    assert_eq!(
        error(owner.call(write(session, &home, Some("hi"), json!({ "fromPath": file }))).await),
        "write hm:// takes content or options.fromPath, not both"
    );
    assert_eq!(hm.blobs().len(), published);

    // write ipfs:// takes the memory file by its ~/memory/ address too.
    let uploaded = output(&owner.call(write(session, "ipfs://", None, json!({ "fromPath": file }))).await.unwrap());
    assert_eq!(uploaded["path"], "notes/weekly-update.md");
    p.server.stop().await;
}

#[tokio::test]
async fn raw_commands_edit_comments_update_the_profile_and_keep_contacts() {
    use seed_agents_protocol::generated::ListSigningIdentities;
    use seed_agents_server::testing::hm::comment::{NewComment, comment};
    use seed_agents_server::testing::hm::document::TextBlock;

    let hm = FakeHm::start().await;
    let p = publisher(&hm).await;
    let (owner, session) = (&p.owner, p.session_id.as_str());
    let notes = format!("hm://{}/notes", p.account);
    let doc = create(&hm, &p, "/notes").await;
    let command = |action: &str, content: Option<&str>, input: Json| {
        write(session, &notes, content, json!({ "action": action, "input": input }))
    };
    let first =
        output(&owner.call(write(session, &notes, Some("First."), json!({ "action": "comment" }))).await.unwrap());
    let reply = json!({ "action": "comment", "replyTo": first["id"] });
    let reply = output(&owner.call(write(session, &notes, Some("A reply."), reply)).await.unwrap());
    let original = hm.blobs().last().cloned().unwrap();

    // An edit: the same record (its tsid as `id`), new blocks, the same document, version and
    // thread links.
    let edited = command("comment.update", Some("Edited **reply**."), json!({ "comment": reply["id"] }));
    let edited = output(&owner.call(edited).await.unwrap());
    let blob = hm.blobs().last().cloned().unwrap();
    let reply_id = reply["commentId"].as_str().unwrap();
    assert_eq!(comment_record_id(&blob).as_deref(), Some(reply_id));
    assert_eq!(blob.text("id"), reply_id.split_once('/').map(|(_, tsid)| tsid));
    assert_eq!(texts(&blob, "body"), ["Paragraph Edited **reply**."]);
    for key in ["space", "path", "version", "replyParent", "threadRoot"] {
        assert_eq!(blob.field(key), original.field(key), "{key}");
    }
    assert_eq!((edited["commentId"].as_str(), edited["target"].as_str()), (Some(reply_id), Some(notes.as_str())));
    assert_eq!(edited["summary"], format!("Updated comment hm://{reply_id} on {notes}."));
    // The body may come in options.input too.
    let again = command("comment.update", None, json!({ "commentId": reply_id, "text": "Edited twice." }));
    output(&owner.call(again).await.unwrap());
    assert_eq!(texts(&hm.blobs().last().cloned().unwrap(), "body"), ["Paragraph Edited twice."]);

    // A deletion: an empty body without thread links; the comment then reads as gone.
    let deleted =
        output(&owner.call(command("comment.delete", None, json!({ "comment": first["id"] }))).await.unwrap());
    let tombstone = hm.blobs().last().cloned().unwrap();
    assert_eq!(comment_record_id(&tombstone).as_deref(), first["commentId"].as_str());
    assert_eq!(tombstone.field("body"), Some(&Ipld::List(Vec::new())));
    assert_eq!((tombstone.field("replyParent"), tombstone.field("threadRoot")), (None, None));
    assert_eq!(deleted["action"], "comment.delete");
    let gone = owner.call(command("comment.update", Some("Back?"), json!({ "comment": first["id"] }))).await;
    assert!(error(gone).starts_with("Hypermedia server"));

    // Only the signer's own comments; the id and the body are required.
    let bea = SigningKey::from_bytes(&[42; 32]);
    let version = [ipld_core::cid::Cid::try_from(doc.version.as_str()).unwrap()];
    let body = [TextBlock { kind: "Paragraph".into(), id: "b1".into(), text: "Bea's.".into(), link: None }];
    let theirs = NewComment {
        ts_ms: 1_700_000_000_500,
        space: p.account.parse().unwrap(),
        path: "/notes",
        version: &version,
        body: &body,
        reply_parent: None,
        thread_root: None,
        private: false,
        edits: None,
    };
    let theirs = comment(&bea, &theirs).unwrap();
    hm.store(&[&theirs.blob]).unwrap();
    let published = hm.blobs().len();
    let refused = owner.call(command("comment.delete", None, json!({ "comment": theirs.id }))).await;
    assert_eq!(
        error(refused),
        format!(
            "Comment {} was written by {}; this agent signs as {} and can only change its own comments",
            theirs.id,
            blob::principal(&bea),
            p.account
        )
    );
    assert_eq!(
        error(owner.call(command("comment.delete", None, json!({}))).await),
        "Comment ID is required (options.input.comment: hm://<author>/<tsid>)"
    );
    assert_eq!(
        error(owner.call(command("comment.update", None, json!({ "comment": reply_id }))).await),
        "Comment body is required (the write's content: the comment's new markdown)"
    );
    assert_eq!(hm.blobs().len(), published, "nothing was published for a refused command");

    // profile.update: a field left out keeps the identity's value; the identity's label follows.
    let home = format!("hm://{}", p.account);
    let profile = |options: Json| {
        let mut options = options;
        options["action"] = json!("profile.update");
        write(session, &home, None, options)
    };
    let described = output(&owner.call(profile(json!({ "input": { "description": "Birds." } }))).await.unwrap());
    let blob = hm.blobs().last().cloned().unwrap();
    assert_eq!((blob.text("type"), blob.signer()), (Some("Profile"), Some(p.account.clone())));
    assert_eq!(
        (blob.text("name"), blob.text("description"), blob.field("avatar")),
        (Some("Ada"), Some("Birds."), None)
    );
    assert_eq!(described["profile"], json!({ "name": "Ada", "account": p.account, "description": "Birds." }));
    let icon = "ipfs://bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy";
    let renamed = profile(json!({ "name": "Ada L.", "input": { "avatar": icon } }));
    output(&owner.call(renamed).await.unwrap());
    let blob = hm.blobs().last().cloned().unwrap();
    assert_eq!(
        (blob.text("name"), blob.text("description"), blob.text("avatar")),
        (Some("Ada L."), Some("Birds."), Some(icon))
    );
    let identities = owner.call(ListSigningIdentities { agent_id: None }).await.unwrap().identities;
    let identity = identities.iter().find(|identity| identity.account_id.as_deref() == Some(&p.account)).unwrap();
    assert_eq!((identity.label.as_deref(), identity.icon.as_deref()), (Some("Ada L."), Some(icon)));
    let published = hm.blobs().len();
    assert!(
        error(owner.call(profile(json!({ "input": { "icon": "pics/me.png" } }))).await)
            .starts_with("Profile icon must be an ipfs:// URL, not pics/me.png")
    );
    assert_eq!(
        error(owner.call(write(session, &notes, None, json!({ "action": "profile.update", "name": "X" }))).await),
        format!(
            "profile.update changes the profile of the account this agent signs as; write it to {home}, not {notes}"
        )
    );
    assert!(error(owner.call(profile(json!({}))).await).starts_with("profile.update needs a name"));
    assert_eq!(hm.blobs().len(), published);

    // profile.alias: an alias Profile, no name.
    let bea_account = blob::principal(&bea).to_string();
    let aliased = output(&owner.call(profile_alias(session, &home, &bea_account)).await.unwrap());
    let blob = hm.blobs().last().cloned().unwrap();
    assert_eq!(
        (blob.text("type"), blob.field("alias"), blob.field("name")),
        (Some("Profile"), Some(&principal_bytes(&bea_account)), None)
    );
    assert_eq!(aliased["alias"], bea_account);

    // contact.create names another account (the address's, when the input names none);
    // contact.delete publishes its tombstone, and only for the signer's own contacts.
    let contact = |address: &str, options: Json| write(session, address, None, options);
    let bea_home = format!("hm://{bea_account}");
    let created = contact(&bea_home, json!({ "action": "contact.create", "name": "Bea" }));
    let created = output(&owner.call(created).await.unwrap());
    let blob = hm.blobs().last().cloned().unwrap();
    assert_eq!((blob.text("type"), blob.text("name")), (Some("Contact"), Some("Bea")));
    assert_eq!(blob.field("subject"), Some(&principal_bytes(&bea_account)));
    let contact_id = created["contactId"].as_str().unwrap().to_owned();
    assert_eq!(Some(contact_id.clone()), comment_record_id(&blob), "a contact's record id is computed as a comment's");
    assert_eq!(created["subject"], bea_account);
    let tsid = contact_id.split_once('/').unwrap().1;
    let deleted = contact(&home, json!({ "action": "contact.delete", "input": { "contact": contact_id } }));
    assert_eq!(output(&owner.call(deleted).await.unwrap())["contactId"], contact_id);
    let blob = hm.blobs().last().cloned().unwrap();
    assert_eq!(
        (blob.text("id"), blob.field("account"), blob.field("subject")),
        (Some(tsid), Some(&principal_bytes(&p.account)), None)
    );
    let published = hm.blobs().len();
    let theirs = format!("{bea_account}/{tsid}");
    assert_eq!(
        error(
            owner.call(contact(&home, json!({ "action": "contact.delete", "input": { "contactId": theirs } }))).await
        ),
        format!(
            "Contact {theirs} belongs to hm://{bea_account}; this agent signs as {} and can only delete its own contacts",
            p.account
        )
    );
    assert_eq!(
        error(owner.call(contact(&home, json!({ "action": "contact.delete", "input": { "contact": "nope" } }))).await),
        "Invalid contact ID format: nope. Expected \"authority/tsid\"."
    );
    assert_eq!(
        error(owner.call(contact(&home, json!({ "action": "contact.create", "name": "Me" }))).await),
        "Contact subject is required (options.input.subject, an account id, or the account's hm:// address)"
    );
    assert_eq!(hm.blobs().len(), published);
    p.server.stop().await;
}

fn profile_alias(session: &str, home: &str, alias: &str) -> seed_agents_protocol::generated::InvokeSessionTool {
    write(session, home, None, json!({ "action": "profile.alias", "input": { "alias": alias } }))
}

/// The identities an agent may sign with are in its prompt by profile name and public key, and
/// `write hm://…` takes either (or `{publicKey}`) as `options.signer` — only for granted keys.
#[tokio::test]
async fn the_prompt_lists_granted_identities_and_the_signer_option_takes_their_public_key() {
    use seed_agents_protocol::generated::GetSession;

    let hm = FakeHm::start().await;
    let (server, owner, _) = start(&hm, false).await;
    let mut identities = Vec::new();
    for label in ["Ada", "Bea", "Bea", "Cy"] {
        let identity = owner
            .call(CreateSigningIdentity { client_request_id: None, label: Some(label.into()) })
            .await
            .unwrap()
            .identity;
        identities.push((identity.name.clone(), identity.account_id.unwrap().into_string()));
    }
    let [(ada_key, ada), (bea_key, bea), (bea2_key, bea2), (_, cy)] = identities.try_into().unwrap();
    let mut def = definition("Signer");
    def.signing_keys = Some(vec![ada_key, bea_key, bea2_key]);
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    let session = owner.create_session(&agent_id, None).await;

    let prompt = owner.call(GetSession::new(session.clone())).await.unwrap().system_prompt_markdown;
    let block = prompt.split_once("<available_signing_identities>\n").expect("the identities block").1;
    let (list, guidance) = block.split_once("\n</available_signing_identities>\n").unwrap();
    let list: Json = serde_json::from_str(list).unwrap();
    assert_eq!(
        list,
        json!([
            { "name": "Ada", "publicKey": ada },
            { "name": "Bea", "publicKey": bea },
            { "name": "Bea", "publicKey": bea2 },
        ])
    );
    assert!(guidance.contains("options.signer"), "{guidance}");

    // A public key, `{publicKey}` and a unique profile name each pick the key that signs.
    for (signer, account, path) in [
        (json!(bea), &bea, "/by-key"),
        (json!({ "publicKey": ada }), &ada, "/by-object"),
        (json!("Ada"), &ada, "/by-name"),
    ] {
        let id = format!("hm://{account}{path}");
        not_found(&hm, &id);
        let options = json!({ "name": "Notes", "signer": signer });
        output(&owner.call(write(&session, &id, Some("Herons."), options)).await.unwrap());
        let blobs = hm.blobs();
        assert_eq!(blobs[blobs.len() - 2].signer().as_deref(), Some(account.as_str()), "signer {signer}");
    }

    // Two granted identities share a name: the error lists both keys. A key the owner holds but
    // did not grant is refused, and nothing is published.
    let before = hm.blobs().len();
    let id = format!("hm://{bea}/ambiguous");
    let ambiguous = error(owner.call(write(&session, &id, Some("x"), json!({ "name": "N", "signer": "Bea" }))).await);
    assert!(ambiguous.contains(&bea) && ambiguous.contains(&bea2), "{ambiguous}");
    let id = format!("hm://{cy}/refused");
    let refused = error(owner.call(write(&session, &id, Some("x"), json!({ "name": "N", "signer": cy }))).await);
    assert!(refused.contains("is not granted"), "{refused}");
    assert_eq!(hm.blobs().len(), before);

    // An agent without signing keys gets no identities block.
    let plain = owner.create_agent("Plain").await;
    let plain_session = owner.create_session(&plain, None).await;
    let prompt = owner.call(GetSession::new(plain_session)).await.unwrap().system_prompt_markdown;
    assert!(!prompt.contains("<available_signing_identities>"));
    server.stop().await;
}

#[tokio::test]
async fn a_draft_is_written_revised_and_published_then_removed_with_its_agent() {
    let hm = FakeHm::start().await;
    let p = publisher(&hm).await;
    let (owner, session) = (&p.owner, p.session_id.as_str());
    let notes = format!("hm://{}/notes", p.account);
    let draft = |action: &str, content: Option<&str>, options: Json| {
        let mut options = options;
        options["action"] = json!(action);
        write(session, &notes, content, options)
    };

    // Written: kept here, nothing published.
    let (requests, blobs_before) = (hm.requests(), hm.blobs().len());
    let created = output(
        &owner
            .call(draft(
                "draft.create",
                Some("# Birds\n\nA heron."),
                json!({ "name": "Bird notes", "metadata": { "summary": "First" } }),
            ))
            .await
            .unwrap(),
    );
    let id = created["draftId"].as_str().unwrap().to_owned();
    assert_eq!((created["action"].as_str(), created["status"].as_str()), (Some("draft.create"), Some("idle")));
    assert_eq!((created["target"].as_str(), created["edit"].as_bool()), (Some(notes.as_str()), Some(false)));
    assert_eq!(created["metadata"], json!({ "name": "Bird notes", "summary": "First" }));
    assert_eq!(hm.requests(), requests, "a draft reaches no server");
    assert_eq!(
        error(owner.call(draft("draft.create", Some("x"), json!({}))).await),
        "draft.create requires a name: pass options.name (or options.metadata.name, or options.input.name)"
    );

    // Revised: new content, a metadata key merged, the name kept.
    let revised = output(
        &owner
            .call(draft(
                "draft.update",
                Some("# Birds\n\nA heron and a crane."),
                json!({ "input": { "draft": id }, "metadata": { "summary": "Second" } }),
            ))
            .await
            .unwrap(),
    );
    assert_eq!(revised["metadata"], json!({ "name": "Bird notes", "summary": "Second" }));
    let got = output(&owner.call(draft("draft.get", None, json!({ "input": { "draftId": id } }))).await.unwrap());
    assert_eq!(got["markdown"], "# Birds\n\nA heron and a crane.");
    assert_eq!(got["name"], "Bird notes");

    // Listed, newest change first; a second draft deleted.
    let other = output(&owner.call(draft("draft.create", Some("Later."), json!({ "name": "Other" }))).await.unwrap());
    let other_id = other["draftId"].as_str().unwrap().to_owned();
    let listed = output(&owner.call(draft("draft.list", None, json!({}))).await.unwrap());
    assert_eq!(listed["summary"], "2 drafts.");
    let mut ids: Vec<&str> =
        listed["drafts"].as_array().unwrap().iter().map(|d| d["draftId"].as_str().unwrap()).collect();
    ids.sort_unstable();
    let mut expected = [id.as_str(), other_id.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    let deleted =
        output(&owner.call(draft("draft.delete", None, json!({ "input": { "draft": other_id } }))).await.unwrap());
    assert_eq!(deleted["deleted"], true);
    assert_eq!(
        error(owner.call(draft("draft.get", None, json!({ "input": { "draft": other_id } }))).await),
        format!("Draft {other_id} not found")
    );
    let listed = output(&owner.call(draft("draft.list", None, json!({}))).await.unwrap());
    assert_eq!(listed["drafts"].as_array().unwrap().len(), 1);

    // A dry run publishes nothing; publishing signs the revised draft as a new document.
    not_found(&hm, &notes);
    let mut dry = write(session, &notes, None, json!({ "action": "draft.publish", "input": { "draft": id } }));
    if let Ipld::Map(input) = &mut dry.input.0 {
        input.insert("dryRun".into(), Ipld::Bool(true));
    }
    let dry = output(&owner.call(dry).await.unwrap());
    assert_eq!(dry["dryRun"], true);
    assert_eq!(hm.blobs().len(), blobs_before);
    let published =
        output(&owner.call(draft("draft.publish", None, json!({ "input": { "draft": id } }))).await.unwrap());
    assert_eq!(published["summary"], format!("Published draft {id} to {notes} (created)."));
    assert_eq!(
        (published["action"].as_str(), published["draftId"].as_str()),
        (Some("draft.publish"), Some(id.as_str()))
    );
    let blobs = hm.blobs();
    let [genesis, change, version_ref] = &blobs[blobs_before..] else { panic!("expected three blobs") };
    assert_eq!(change.signer().as_deref(), Some(p.account.as_str()));
    assert_eq!(
        ops(change),
        [
            "SetAttributes 2",
            "ReplaceBlock Heading Birds",
            "ReplaceBlock Paragraph A heron and a crane.",
            "MoveBlocks 2"
        ]
    );
    assert_eq!(published["version"], change.cid);
    assert_eq!(version_ref.text("path"), Some("/notes"));
    let got = output(&owner.call(draft("draft.get", None, json!({ "input": { "draft": id } }))).await.unwrap());
    assert_eq!((got["status"].as_str(), got["edit"].as_bool()), (Some("published"), Some(true)));
    assert_eq!(
        (got["publishedId"].as_str(), got["publishedVersion"].as_str()),
        (Some(notes.as_str()), Some(change.cid.as_str()))
    );

    // Revised and published again: an update of the document it created.
    hm.answer(
        "Resource",
        &[("id", &notes)],
        json!({ "type": "document", "document": { "content": [ { "block": { "id": "blockOld", "type": "Paragraph" } } ] } }),
    );
    hm.answer(
        "ListChanges",
        &[("targetId", &notes)],
        json!({ "changes": [ { "id": genesis.cid, "deps": [] }, { "id": change.cid, "deps": [genesis.cid] } ] }),
    );
    owner.call(draft("draft.update", Some("Herons only."), json!({ "input": { "draft": id } }))).await.unwrap();
    let again = output(&owner.call(draft("draft.publish", None, json!({ "input": { "draft": id } }))).await.unwrap());
    assert_eq!(again["summary"], format!("Published draft {id} to {notes} (updated)."));
    let blobs = hm.blobs();
    let [next, _] = &blobs[blobs_before + 3..] else { panic!("expected two blobs") };
    assert_eq!(next.links("deps"), Some(vec![change.cid.clone()]));
    assert!(ops(next).contains(&"ReplaceBlock Paragraph Herons only.".to_owned()), "{:?}", ops(next));

    // Drafts are the agent's own: another agent of the owner does not see them.
    let mut def = definition("Other");
    def.signing_key = None;
    let other_agent = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    let other_session = owner.create_session(&other_agent, None).await;
    let foreign = write(&other_session, &notes, None, json!({ "action": "draft.get", "input": { "draft": id } }));
    assert_eq!(error(owner.call(foreign).await), format!("Draft {id} not found"));

    // Deleting the agent deletes its drafts.
    async fn count(server: &TestServer) -> i64 {
        read_db(server, |conn| conn.query_row("SELECT COUNT(*) FROM agent_drafts", [], |row| row.get(0))).await
    }
    assert_eq!(count(&p.server).await, 1);
    owner.call(seed_agents_protocol::generated::DeleteAgent { agent_id: p.agent_id.clone() }).await.unwrap();
    assert_eq!(count(&p.server).await, 0);
    p.server.stop().await;
}
