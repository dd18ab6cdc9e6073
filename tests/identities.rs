//! Signing identities (`CreateSigningIdentity`, `ImportSigningIdentity`, `UpdateSigningIdentity`,
//! `DeleteSigningIdentity`, `ListSigningIdentities`) against a fake Hypermedia server that checks
//! every published blob's CID and signature, and the default trigger `CreateAgent` stores.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AcceptAgentInvite, AgentActivitySource, AgentCollaboratorRole, AgentTriggerSource, CreateAgent,
    CreateSigningIdentity, DeleteAgent, DeleteSigningIdentity, ImportSigningIdentity, InviteAgentCollaborator,
    ListSigningIdentities, SetSecret, SigningIdentity, SigningIdentityIcon, UpdateSigningIdentity,
};
use seed_agents_protocol::{Bytes, Ed25519Signer, Signer as _, Value, wire};
use seed_agents_sdk::Error;
use seed_agents_server::testing::db::OptionalExtension;

use crate::support::db::{read_db, write_db};
use crate::support::hm::{FakeHm, Published};
use crate::support::{TestServer, User, api_error, definition, postgres_url};

async fn start(hm_url: &str) -> TestServer {
    let url = hm_url.to_owned();
    TestServer::start_with(tempfile::tempdir().unwrap(), move |config| config.hm_server_url = url).await
}

async fn create(user: &User, label: Option<&str>) -> SigningIdentity {
    user.call(CreateSigningIdentity { client_request_id: None, label: label.map(Into::into) })
        .await
        .expect("create identity")
        .identity
}

async fn list(user: &User, agent_id: Option<&str>) -> Result<Vec<SigningIdentity>, Error> {
    Ok(user.call(ListSigningIdentities { agent_id: agent_id.map(Into::into) }).await?.identities)
}

/// The stored (decrypted) seed of identity `name` of `account`.
async fn stored_seed(server: &TestServer, account: &str, name: &str) -> Vec<u8> {
    let app = server.server.as_ref().unwrap().app().clone();
    let (account, name) = (account.to_owned(), name.to_owned());
    let sealed: Vec<u8> = {
        let (account, name) = (account.clone(), name.clone());
        app.db
            .read(move |conn| {
                Ok(conn.query_row(
                    "SELECT ciphertext FROM secrets WHERE account_id = ?1 AND name = ?2",
                    (account, name),
                    |row| row.get(0),
                )?)
            })
            .await
            .unwrap()
    };
    app.secrets.open(&account, &name, &sealed).unwrap()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

fn seed_account(seed: [u8; 32]) -> String {
    Ed25519Signer::from_seed(&seed).principal().to_string()
}

/// The ops of a Change blob's body.
fn ops(change: &Published) -> Vec<BTreeMap<String, Ipld>> {
    let Some(Ipld::Map(body)) = change.field("body") else { panic!("no body: {:?}", change.value) };
    let Some(Ipld::List(ops)) = body.get("ops") else { panic!("no ops: {body:?}") };
    ops.iter().map(|op| if let Ipld::Map(op) = op { op.clone() } else { panic!("op {op:?}") }).collect()
}

fn string(text: &str) -> Ipld {
    Ipld::String(text.to_owned())
}

/// Checks what creating identity `account` named `name` published in one request: its Profile,
/// then its home document (genesis Change, content Change, version Ref), all signed by the new
/// key (the fake already checked CIDs, signatures and links).
fn check_account_blobs(blobs: &[Published], account: &str, name: &str) {
    let types: Vec<_> = blobs.iter().map(|blob| blob.text("type")).collect();
    assert_eq!(types, [Some("Profile"), Some("Change"), Some("Change"), Some("Ref")]);
    for blob in blobs {
        assert_eq!(blob.codec, 0x71);
        assert_eq!(blob.signer().as_deref(), Some(account), "{:?}", blob.text("type"));
    }
    let [profile, genesis, change, version] = blobs else { unreachable!() };

    assert_eq!(profile.text("name"), Some(name));
    assert!(profile.cid.starts_with("bafyrei"), "{}", profile.cid);
    assert!(matches!(profile.field("ts"), Some(Ipld::Integer(_))));
    assert_eq!(profile.field("avatar"), None);

    // The genesis is {type, signer, sig, ts: 0}: the same for every document of this key.
    assert!(genesis.cid.starts_with("bafyrei"), "{}", genesis.cid);
    assert_eq!(genesis.integer("ts"), Some(0));
    assert_eq!(genesis.value.as_ref().unwrap().len(), 4);

    // The content change: deps = [genesis], depth 1, the name then one paragraph at the top.
    assert!(change.cid.starts_with("bafyrei"), "{}", change.cid);
    assert_eq!(change.link("genesis"), Some(genesis.cid.clone()));
    assert_eq!(change.links("deps"), Some(vec![genesis.cid.clone()]));
    assert_eq!(change.integer("depth"), Some(1));
    let ts = change.integer("ts").unwrap();
    assert!(ts > 0);
    let ops = ops(change);
    assert_eq!(ops.len(), 3);
    let Some(Ipld::Map(body)) = change.field("body") else { unreachable!() };
    assert_eq!(body.get("opCount"), Some(&Ipld::Integer(3)));
    let name_attr = Ipld::Map(BTreeMap::from([
        ("key".to_owned(), Ipld::List(vec![string("name")])),
        ("value".to_owned(), string(name)),
    ]));
    assert_eq!(ops[0].get("type"), Some(&string("SetAttributes")));
    assert_eq!(ops[0].get("attrs"), Some(&Ipld::List(vec![name_attr])));
    assert_eq!(ops[1].get("type"), Some(&string("ReplaceBlock")));
    let Some(Ipld::Map(block)) = ops[1].get("block") else { panic!("{:?}", ops[1]) };
    let Some(Ipld::String(block_id)) = block.get("id") else { panic!("{block:?}") };
    assert_eq!(block_id.len(), 8);
    assert!(block_id.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'), "{block_id}");
    let expected_block = BTreeMap::from([
        ("type".to_owned(), string("Paragraph")),
        ("id".to_owned(), string(block_id)),
        ("text".to_owned(), string("This is an agentic account.")),
        ("annotations".to_owned(), Ipld::List(Vec::new())),
    ]);
    assert_eq!(block, &expected_block);
    let expected_move = BTreeMap::from([
        ("type".to_owned(), string("MoveBlocks")),
        ("blocks".to_owned(), Ipld::List(vec![string(block_id)])),
        ("parent".to_owned(), string("")),
    ]);
    assert_eq!(ops[2], expected_move);

    // The version Ref: sent without a CID, so the server named it (BLAKE2b-256); home document
    // of the signer's own space, so no `space` and no `path`.
    assert!(version.cid.starts_with("bafy2bza"), "{}", version.cid);
    assert_eq!(version.link("genesisBlob"), Some(genesis.cid.clone()));
    assert_eq!(version.links("heads"), Some(vec![change.cid.clone()]));
    assert_eq!(version.integer("generation"), Some(ts));
    assert_eq!(version.integer("ts"), Some(ts));
    assert_eq!((version.field("space"), version.field("path")), (None, None));
}

#[tokio::test]
async fn create_publishes_the_profile_and_home_document_and_stores_the_seed_sealed() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();

    let identity = create(&user, Some("  Ada  ")).await;
    let account = identity.account_id.clone().expect("accountId");
    assert!(account.starts_with("z6Mk"), "{account}");
    assert_eq!(identity.name, format!("hm-account-{}", &account[..16]));
    assert_eq!(identity.label.as_deref(), Some("Ada"));
    assert_eq!(identity.server_url.as_deref(), Some(hm.url.as_str()));
    assert_eq!((identity.icon.as_deref(), identity.dev), (None, None));
    assert_eq!(identity.created_at, identity.updated_at);

    // One PublishBlobs call: the Profile and the home document, signed by the new key.
    assert_eq!(hm.requests(), 1);
    check_account_blobs(&hm.blobs(), &account, "Ada");

    // A second identity has its own genesis (it is per signer) and its own block id.
    let other = create(&user, Some("Bob")).await;
    let blobs = hm.blobs();
    check_account_blobs(&blobs[4..], other.account_id.as_deref().unwrap(), "Bob");
    assert_ne!(blobs[1].cid, blobs[5].cid);

    // The stored value is the seed of that account; it never appears in a response.
    let seed: [u8; 32] = stored_seed(&server, &user.id, &identity.name).await.try_into().unwrap();
    assert_eq!(seed_account(seed), account);
    let listed = list(&user, None).await.unwrap();
    assert_eq!(listed, vec![other, identity.clone()]);
    for response in [wire::to_vec(&identity).unwrap(), wire::to_vec(&listed).unwrap()] {
        assert!(!contains(&response, &seed));
    }
    // Nor is it readable through the database as plaintext.
    let app = server.server.as_ref().unwrap().app().clone();
    let name = identity.name.clone();
    let rows: Vec<u8> = app
        .db
        .read(move |conn| {
            Ok(conn.query_row("SELECT ciphertext FROM secrets WHERE name = ?1", (name,), |row| row.get(0))?)
        })
        .await
        .unwrap();
    assert!(!contains(&rows, &seed));
}

#[tokio::test]
async fn create_without_a_label_names_the_account_and_rejects_a_blank_label() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();
    let identity = create(&user, None).await;
    let account = identity.account_id.clone().unwrap();
    let expected = format!("Agent account {}", &account[..10]);
    assert_eq!(identity.label.as_deref(), Some(expected.as_str()));
    check_account_blobs(&hm.blobs(), &account, &expected);

    let blank = user.call(CreateSigningIdentity { client_request_id: None, label: Some("  ".into()) }).await;
    assert_eq!(api_error(blank), (400, "Signing identity label is required".to_owned()));
    let long = user.call(CreateSigningIdentity { client_request_id: None, label: Some("x".repeat(257)) }).await;
    assert_eq!(api_error(long), (400, "Signing identity label is too large".to_owned()));
    assert_eq!(hm.blobs().len(), 4);
}

#[tokio::test]
async fn create_is_idempotent_with_a_client_request_id() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();
    let call =
        |label: &str| CreateSigningIdentity { client_request_id: Some("req-1".into()), label: Some(label.into()) };
    let first = user.call(call("Ada")).await.unwrap().identity;
    let again = user.call(call("Ada")).await.unwrap().identity;
    assert_eq!(first, again);
    assert_eq!(hm.blobs().len(), 4, "a replay publishes nothing");
    let other = user.call(call("Bob")).await;
    assert_eq!(api_error(other), (409, "Client request ID payload mismatch".to_owned()));
    assert_eq!(list(&user, None).await.unwrap().len(), 1);
    // Keys are per account.
    let stranger = server.user();
    let theirs = stranger.call(call("Ada")).await.unwrap().identity;
    assert_ne!(theirs.id, first.id);
}

#[tokio::test]
async fn publish_failures_are_502_and_store_nothing() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();
    hm.fail_with(Some((500, "node is reindexing")));
    let (status, message) = api_error(user.call(CreateSigningIdentity { client_request_id: None, label: None }).await);
    assert_eq!(status, 502);
    let prefix = format!("Failed to publish agent account to {}: ", hm.url);
    assert!(message.starts_with(&prefix), "{message}");
    assert!(message.contains("HTTP 500 from PublishBlobs"), "{message}");
    assert!(message.contains("node is reindexing"), "{message}");
    assert_eq!(list(&user, None).await.unwrap(), vec![]);
    assert_eq!(secret_rows(&server).await, 0, "no key is kept for an account that was not published");
    assert_eq!((hm.requests(), hm.blobs().len()), (1, 0), "one all-or-nothing request");

    // Once the server is back, the same request (and client request id) goes through.
    let retried = CreateSigningIdentity { client_request_id: Some("retry".into()), label: Some("Ada".into()) };
    let failed = user.call(retried.clone()).await;
    assert_eq!(api_error(failed).0, 502);
    hm.fail_with(None);
    let identity = user.call(retried).await.unwrap().identity;
    check_account_blobs(&hm.blobs(), identity.account_id.as_deref().unwrap(), "Ada");
    assert_eq!(secret_rows(&server).await, 1);

    // A server that is not there at all.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let gone = start(&format!("http://{closed}")).await;
    let user = gone.user();
    let (status, message) = api_error(user.call(CreateSigningIdentity { client_request_id: None, label: None }).await);
    assert_eq!(status, 502);
    assert!(message.starts_with(&format!("Failed to publish agent account to http://{closed}: ")), "{message}");
    assert_eq!(list(&user, None).await.unwrap(), vec![]);
    assert_eq!(secret_rows(&gone).await, 0);
}

/// How many secret rows the server holds, of any account.
async fn secret_rows(server: &TestServer) -> i64 {
    let app = server.server.as_ref().unwrap().app().clone();
    app.db.read(|conn| Ok(conn.query_row("SELECT count(*) FROM secrets", [], |row| row.get(0))?)).await.unwrap()
}

#[tokio::test]
async fn import_checks_the_seed_refuses_duplicates_and_publishes_nothing() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();
    let import = |seed: Vec<u8>, label: Option<&str>| ImportSigningIdentity {
        client_request_id: None,
        label: label.map(Into::into),
        seed: Bytes::from(seed),
    };
    for bad in [vec![], vec![1; 31], vec![1; 33], vec![1; 64]] {
        let result = user.call(import(bad, None)).await;
        assert_eq!(api_error(result), (400, "Key seed must be exactly 32 bytes".to_owned()));
    }
    let seed = [9u8; 32];
    let identity = user.call(import(seed.to_vec(), None)).await.unwrap().identity;
    let account = seed_account(seed);
    assert_eq!(identity.account_id.as_deref(), Some(account.as_str()));
    assert_eq!(identity.name, format!("hm-account-{}", &account[..16]));
    assert_eq!(identity.label, None, "no invented label on import");
    assert_eq!(identity.server_url.as_deref(), Some(hm.url.as_str()));
    assert!(!contains(&wire::to_vec(&identity).unwrap(), &seed));
    assert_eq!(stored_seed(&server, &user.id, &identity.name).await, seed);
    assert_eq!(hm.requests(), 0, "import publishes nothing");

    let again = user.call(import(seed.to_vec(), Some("Again"))).await;
    assert_eq!(api_error(again), (409, format!("This account key is already on the server ({account})")));

    let labelled = user.call(import(vec![10; 32], Some(" Imported "))).await.unwrap().identity;
    assert_eq!(labelled.label.as_deref(), Some("Imported"));
    // Another account may hold the same key.
    let other = server.user();
    other.call(import(seed.to_vec(), None)).await.unwrap();
}

#[tokio::test]
async fn import_is_idempotent_over_the_label_only() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();
    let import = |seed: [u8; 32], label: &str| ImportSigningIdentity {
        client_request_id: Some("imp".into()),
        label: Some(label.into()),
        seed: Bytes::from(seed.to_vec()),
    };
    let first = user.call(import([3; 32], "A")).await.unwrap().identity;
    let replay = user.call(import([3; 32], "A")).await.unwrap().identity;
    assert_eq!(first, replay);
    let mismatch = user.call(import([3; 32], "B")).await;
    assert_eq!(api_error(mismatch), (409, "Client request ID payload mismatch".to_owned()));
    assert_eq!(list(&user, None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn update_republishes_the_profile_with_icon() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();
    let created = create(&user, Some("Ada")).await;
    let account = created.account_id.clone().unwrap();
    let update = |label: &str, icon: Option<&[u8]>| UpdateSigningIdentity {
        icon: icon.map(|data| SigningIdentityIcon {
            extra: Default::default(),
            data: Bytes::from(data.to_vec()),
            file_name: Some("a.png".into()),
            mime_type: Some("image/png".into()),
        }),
        label: label.into(),
        name: created.name.clone(),
    };

    let renamed = user.call(update(" Ada Lovelace ", None)).await.unwrap().identity;
    assert_eq!(renamed.label.as_deref(), Some("Ada Lovelace"));
    assert_eq!((renamed.id.as_str(), renamed.created_at), (created.id.as_str(), created.created_at));
    assert_eq!(renamed.icon, None);
    let blobs = hm.blobs();
    assert_eq!(blobs.len(), 5);
    assert_eq!(blobs[4].text("name"), Some("Ada Lovelace"));
    assert_eq!(blobs[4].signer().as_deref(), Some(account.as_str()));
    assert_eq!(blobs[4].field("avatar"), None);

    let icon = b"\x89PNG fake icon bytes";
    let with_icon = user.call(update("Ada", Some(icon))).await.unwrap().identity;
    let blobs = hm.blobs();
    assert_eq!(blobs.len(), 7);
    assert_eq!((blobs[5].codec, blobs[5].data.as_slice()), (0x55, &icon[..]));
    let avatar = format!("ipfs://{}", blobs[5].cid);
    assert_eq!(with_icon.icon.as_deref(), Some(avatar.as_str()));
    assert_eq!(blobs[6].text("avatar"), Some(avatar.as_str()));
    assert_eq!(blobs[6].signer().as_deref(), Some(account.as_str()));

    // A later rename keeps the icon.
    let kept = user.call(update("Ada L.", None)).await.unwrap().identity;
    assert_eq!(kept.icon.as_deref(), Some(avatar.as_str()));
    assert_eq!(hm.blobs()[7].text("avatar"), Some(avatar.as_str()));
    assert_eq!(list(&user, None).await.unwrap(), vec![kept]);

    // An icon of more than one chunk: two raw leaves and a dag-pb root, in one publish.
    let big: Vec<u8> = (0..262_145).map(|i| (i % 251) as u8).collect();
    let with_big = user.call(update("Ada", Some(&big))).await.unwrap().identity;
    let blobs = hm.blobs();
    assert_eq!(blobs.len(), 12);
    let codecs: Vec<u8> = blobs[8..11].iter().map(|blob| blob.codec).collect();
    assert_eq!(codecs, [0x55, 0x55, 0x70]);
    let root = "ipfs://bafybeiexg2oqkfnj56l7fcmawswqbijt5shq4b5rg6a546uwpkqqzwjioi";
    assert_eq!(with_big.icon.as_deref(), Some(root));
    assert_eq!(blobs[11].text("avatar"), Some(root));
    let blank = user.call(update(" ", None)).await;
    assert_eq!(api_error(blank), (400, "Signing identity label is required".to_owned()));

    hm.fail_with(Some((500, "down")));
    let (status, message) = api_error(user.call(update("Ada", None)).await);
    assert_eq!(status, 502);
    assert!(message.starts_with(&format!("Failed to publish agent account profile to {}: ", hm.url)), "{message}");
    let (status, message) = api_error(user.call(update("Ada", Some(icon))).await);
    assert_eq!(status, 502);
    assert!(message.starts_with(&format!("Failed to publish agent account icon to {}: ", hm.url)), "{message}");
    assert_eq!(list(&user, None).await.unwrap()[0].icon.as_deref(), Some(root), "unchanged on failure");
}

#[tokio::test]
async fn update_and_delete_need_an_identity() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let user = server.user();
    user.call(SetSecret { metadata: None, name: "PLAIN".into(), value: Bytes::from(b"v".to_vec()) }).await.unwrap();
    let metadata = [("kind".to_owned(), Value(Ipld::String("provider-oauth".into())))].into_iter().collect();
    user.call(SetSecret { metadata: Some(metadata), name: "OAUTH".into(), value: Bytes::from(b"v".to_vec()) })
        .await
        .unwrap();
    for name in ["PLAIN", "OAUTH", "missing"] {
        let update = UpdateSigningIdentity { icon: None, label: "x".into(), name: name.into() };
        assert_eq!(api_error(user.call(update).await), (404, "Signing identity not found".to_owned()));
        let delete = DeleteSigningIdentity { name: name.into() };
        assert_eq!(api_error(user.call(delete).await), (404, "Signing identity not found".to_owned()));
    }
    assert_eq!(list(&user, None).await.unwrap(), vec![], "plain secrets are not identities");

    let identity = create(&user, Some("Ada")).await;
    // Another account cannot touch it.
    let stranger = server.user();
    let delete = DeleteSigningIdentity { name: identity.name.clone() };
    assert_eq!(api_error(stranger.call(delete.clone()).await), (404, "Signing identity not found".to_owned()));
    let deleted = user.call(delete.clone()).await.unwrap();
    assert_eq!(deleted.name, identity.name);
    assert_eq!(list(&user, None).await.unwrap(), vec![]);
    assert_eq!(api_error(user.call(delete).await), (404, "Signing identity not found".to_owned()));
    assert_eq!(hm.blobs().len(), 4, "delete publishes nothing");
}

#[tokio::test]
async fn collaborators_see_only_the_keys_granted_to_the_agent() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let owner = server.user();
    let granted = create(&owner, Some("Granted")).await;
    let private = create(&owner, Some("Private")).await;
    owner.ensure_provider().await;
    let mut def = definition("Helper");
    def.signing_keys = Some(vec![granted.name.clone()]);
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;

    let names = |identities: Vec<SigningIdentity>| identities.into_iter().map(|i| i.name).collect::<Vec<_>>();
    // Newest first.
    assert_eq!(names(list(&owner, None).await.unwrap()), [private.name.clone(), granted.name.clone()]);
    assert_eq!(names(list(&owner, Some(&agent_id)).await.unwrap()), [private.name.clone(), granted.name.clone()]);

    let reader = server.user();
    let invite = InviteAgentCollaborator {
        agent_id: agent_id.clone(),
        account_id: reader.id.clone(),
        role: AgentCollaboratorRole::Reader,
    };
    owner.call(invite).await.unwrap();
    // Pending invitations grant nothing.
    assert_eq!(api_error(list(&reader, Some(&agent_id)).await), (404, "Agent not found".to_owned()));
    reader.call(AcceptAgentInvite { agent_id: agent_id.clone() }).await.unwrap();
    let seen = list(&reader, Some(&agent_id)).await.unwrap();
    assert_eq!(seen, vec![list(&owner, None).await.unwrap()[1].clone()]);
    assert_eq!(list(&reader, None).await.unwrap(), vec![], "without agentId: the caller's own keys");

    let stranger = server.user();
    assert_eq!(api_error(list(&stranger, Some(&agent_id)).await), (404, "Agent not found".to_owned()));
    assert_eq!(api_error(list(&owner, Some("no-such-agent")).await), (404, "Agent not found".to_owned()));
}

type TriggerRow = (String, String, i64, Vec<u8>, String, Option<Vec<u8>>, i64, i64, Option<i64>);

async fn triggers(server: &TestServer, agent_id: &str) -> Vec<TriggerRow> {
    let app = server.server.as_ref().unwrap().app().clone();
    let agent_id = agent_id.to_owned();
    app.db
        .read(move |conn| {
            let mut statement = conn.prepare(
                "SELECT account_id, name, enabled, source_cbor, prompt, continuation_cbor, created_at, updated_at,
                        last_fired_at
                 FROM agent_triggers WHERE agent_id = ?1",
            )?;
            let rows = statement
                .query_map((agent_id,), |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                        row.get(6)?,
                        row.get(7)?,
                        row.get(8)?,
                    ))
                })?
                .collect::<seed_agents_server::testing::db::Result<Vec<_>>>()?;
            Ok(rows)
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn create_agent_adds_the_default_trigger_for_an_account_key() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let owner = server.user();
    owner.ensure_provider().await;
    let identity = create(&owner, Some("Ada")).await;
    let account = identity.account_id.clone().unwrap();

    let mut def = definition(" Scout ");
    def.signing_key = Some(identity.name.clone());
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    let rows = triggers(&server, &agent_id).await;
    assert_eq!(rows.len(), 1);
    let (trigger_account, name, enabled, source, prompt, continuation, created, updated, fired) = rows[0].clone();
    assert_eq!(trigger_account, owner.id);
    assert_eq!(name, "Mentions, replies, and comments for Scout");
    assert_eq!(enabled, 1);
    assert_eq!(prompt, "Respond to the mention, reply, or comment on your document, performing any action requested.");
    assert_eq!((continuation, fired), (None, None));
    assert_eq!(created, updated);
    let AgentTriggerSource::ActivitySource(activity) = wire::from_slice(&source).unwrap() else {
        panic!("not an activity source")
    };
    assert_eq!(activity.conditions.len(), 3);
    let mut kinds = Vec::new();
    for condition in &activity.conditions {
        match &condition.source {
            AgentActivitySource::UserMentionSource(source) => {
                assert_eq!(source.mentioned_accounts, std::slice::from_ref(&account));
                kinds.push("user-mention");
            }
            AgentActivitySource::CommentReplySource(source) => {
                assert_eq!(source.replied_to_accounts, std::slice::from_ref(&account));
                kinds.push("comment-reply");
            }
            AgentActivitySource::DocumentAuthorCommentSource(source) => {
                assert_eq!(source.document_authors, std::slice::from_ref(&account));
                kinds.push("document-author-comment");
            }
            other => panic!("unexpected condition {other:?}"),
        }
    }
    assert_eq!(kinds, ["user-mention", "comment-reply", "document-author-comment"]);
    let ids: std::collections::BTreeSet<_> = activity.conditions.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids.len(), 3, "condition ids are distinct");

    // signingKeys[0] is the primary key too.
    let mut def = definition("Second");
    def.signing_keys = Some(vec![identity.name.clone()]);
    let second = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    assert_eq!(triggers(&server, &second).await[0].1, "Mentions, replies, and comments for Second");

    // No signing key: no trigger. Deleting the agent deletes its trigger.
    let plain = owner.create_agent("Plain").await;
    assert!(triggers(&server, &plain).await.is_empty());
    owner.call(DeleteAgent { agent_id: agent_id.clone() }).await.unwrap();
    assert!(triggers(&server, &agent_id).await.is_empty());

    // A replayed CreateAgent adds no second trigger.
    let mut def = definition("Replayed");
    def.signing_key = Some(identity.name.clone());
    let create = CreateAgent { client_request_id: Some("agent-1".into()), definition: def };
    let first = owner.call(create.clone()).await.unwrap().agent_id;
    assert_eq!(owner.call(create).await.unwrap().agent_id, first);
    assert_eq!(triggers(&server, &first).await.len(), 1);
}

#[tokio::test]
async fn a_trigger_that_cannot_be_stored_does_not_fail_create_agent() {
    let hm = FakeHm::start().await;
    let server = start(&hm.url).await;
    let owner = server.user();
    owner.ensure_provider().await;
    let identity = create(&owner, Some("Ada")).await;
    // Break the table behind the server's back: the insert fails, the agent is still created. A
    // trigger that refuses every row, in each database's own trigger language.
    let refuse = if postgres_url().is_some() {
        "CREATE FUNCTION refuse_triggers() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'no'; END $$;
         CREATE TRIGGER refuse_triggers BEFORE INSERT ON agent_triggers FOR EACH ROW EXECUTE FUNCTION refuse_triggers();"
    } else {
        "CREATE TRIGGER refuse_triggers BEFORE INSERT ON agent_triggers BEGIN SELECT RAISE(ABORT, 'no'); END;"
    };
    write_db(&server, move |conn| conn.execute_batch(refuse)).await;
    let mut def = definition("Sturdy");
    def.signing_key = Some(identity.name.clone());
    let agent_id = owner.call(CreateAgent { client_request_id: None, definition: def }).await.unwrap().agent_id;
    assert!(triggers(&server, &agent_id).await.is_empty());
    let exists: Option<String> = read_db(&server, move |conn| {
        conn.query_row("SELECT id FROM agents WHERE id = ?1", (agent_id.as_str(),), |row| row.get(0)).optional()
    })
    .await;
    assert!(exists.is_some());
}
