//! The fake Hypermedia server's own checks (`support::hm::blobs`): what it refuses to store,
//! and the CIDs it names blobs with, against blobs the server's own `hm` code builds.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::{Principal, wire};
use seed_agents_server::testing::hm::Blob;
use seed_agents_server::testing::hm::blob::principal;
use seed_agents_server::testing::hm::document;

use crate::support::hm::Published;
use crate::support::hm::blobs::{blake2b_cid, comment_answer, comment_record_id, publish};

fn body(blobs: &[&Blob]) -> Vec<u8> {
    seed_agents_server::testing::hm::publish_blobs_body(blobs.iter().copied()).unwrap()
}

#[test]
fn changes_and_refs_must_link_what_was_published_before() {
    let key = SigningKey::from_bytes(&[7; 32]);
    let ops = document::new_document_ops("Doc", Vec::new());
    let new = document::new_document(&key, 5, principal(&key), "", &ops).unwrap();
    let (genesis, change, version) = (&new.genesis.blob, &new.change.blob, &new.version_ref);

    let rejected = |blobs: &[&Blob], stored: &[Published]| publish(&body(blobs), stored).unwrap_err();
    assert!(rejected(&[genesis, version], &[]).contains("was not published before"));
    assert!(rejected(&[change], &[]).contains("was not published before"));
    let deep = document::content_change(&key, 5, &new.genesis.cid, &[new.genesis.cid], 2, &ops).unwrap();
    assert!(rejected(&[genesis, &deep.blob], &[]).contains("depth must be 1"));

    let stored = publish(&body(&[genesis, change, version]), &[]).unwrap();
    assert!(stored[2].cid.starts_with("bafy2bza"), "{}", stored[2].cid);
    // A later change builds on the stored head, one level deeper.
    let next = document::content_change(&key, 6, &new.genesis.cid, &[new.change.cid], 2, &[]).unwrap();
    publish(&body(&[&next.blob]), &stored).unwrap();
    let flat = document::content_change(&key, 6, &new.genesis.cid, &[new.change.cid], 1, &[]).unwrap();
    assert!(rejected(&[&flat.blob], &stored).contains("depth must be 2"));
    // A Ref's heads must be Changes of its own genesis.
    let other = SigningKey::from_bytes(&[8; 32]);
    let foreign = document::genesis(&other).unwrap();
    let input = document::VersionRef {
        ts_ms: 6,
        space: principal(&key),
        path: "",
        genesis: &foreign.cid,
        heads: &[new.change.cid],
        generation: 6,
        capability: None,
    };
    let bad_ref = document::version_ref(&other, &input).unwrap();
    assert!(rejected(&[&foreign.blob, &bad_ref], &stored).contains("is not a Change of genesis"));
}

#[test]
fn comments_redirects_and_capabilities_are_checked() {
    use seed_agents_server::testing::hm::comment::{NewComment, comment};
    use seed_agents_server::testing::hm::document::{RefTarget, TextBlock};
    let key = SigningKey::from_bytes(&[7; 32]);
    let me = principal(&key);
    let new = document::new_document(&key, 5, me, "/a", &document::new_document_ops("A", Vec::new())).unwrap();
    let stored = publish(&body(&[&new.genesis.blob, &new.change.blob, &new.version_ref]), &[]).unwrap();
    let rejected = |blobs: &[&Blob], stored: &[Published]| publish(&body(blobs), stored).unwrap_err();
    let block = [TextBlock { kind: "Paragraph".into(), id: "b1".into(), text: "hi".into(), link: None }];
    let on = |version: &[ipld_core::cid::Cid], parent: Option<ipld_core::cid::Cid>| {
        let input = NewComment {
            ts_ms: 6,
            space: me,
            path: "/a",
            version,
            body: &block,
            reply_parent: parent,
            thread_root: parent,
            private: false,
            edits: None,
        };
        comment(&key, &input).unwrap()
    };
    // A comment must be about known changes; a reply must link a known comment.
    assert!(rejected(&[&on(&[new.genesis.cid], None).blob], &[]).contains("was not published before"));
    let first = on(&[new.change.cid], None);
    let added = publish(&body(&[&first.blob]), &stored).unwrap();
    let stored = [stored, added].concat();
    assert_eq!(comment_record_id(&stored[3]).as_deref(), Some(first.id.as_str()));
    let stranger = on(&[new.change.cid], Some(new.change.cid));
    assert!(rejected(&[&stranger.blob], &stored).contains("is not a comment on"));
    let cid: ipld_core::cid::Cid = stored[3].cid.parse().unwrap();
    publish(&body(&[&on(&[new.change.cid], Some(cid)).blob]), &stored).unwrap();
    assert_eq!(comment_answer(&stored, &first.id).unwrap()["targetVersion"], new.change.cid.to_string());

    // Redirects have no heads; another space needs that space's capability.
    let input = |space, capability| document::VersionRef {
        ts_ms: 7,
        space,
        path: "/a",
        genesis: &new.genesis.cid,
        heads: &[],
        generation: 5,
        capability,
    };
    let redirect = RefTarget::Redirect { space: me, path: "/b", republish: false };
    publish(&body(&[&document::reference(&key, &input(me, None), redirect).unwrap()]), &stored).unwrap();
    let heads = [new.change.cid];
    let mut bad = document::reference(&key, &input(me, None), redirect).unwrap();
    let Ok(Ipld::Map(mut fields)) = wire::decode_ipld(&bad.data) else { unreachable!() };
    fields.insert("heads".into(), Ipld::List(heads.iter().copied().map(Ipld::Link).collect()));
    fields.remove("sig");
    fields.remove("signer");
    bad.data = seed_agents_server::testing::hm::blob::sign(&key, fields).unwrap();
    assert!(rejected(&[&bad], &stored).contains("a redirect Ref must have no heads"));
    let other = SigningKey::from_bytes(&[8; 32]);
    let theirs = principal(&other);
    let foreign = document::reference(&key, &input(theirs, None), RefTarget::Tombstone).unwrap();
    assert!(rejected(&[&foreign], &stored).contains("without a capability"));
    let grant = |role: &str, delegate: Principal| {
        let fields = BTreeMap::from([
            ("type".to_owned(), Ipld::String("Capability".into())),
            ("ts".to_owned(), Ipld::Integer(8)),
            ("delegate".to_owned(), Ipld::Bytes(delegate.to_bytes().to_vec())),
            ("role".to_owned(), Ipld::String(role.into())),
        ]);
        Blob { cid: None, data: seed_agents_server::testing::hm::blob::sign(&other, fields).unwrap() }
    };
    let wrong = publish(&body(&[&grant("WRITER", theirs)]), &stored).unwrap();
    let right = publish(&body(&[&grant("AGENT", me)]), &stored).unwrap();
    let with = |capability: &Published| {
        let cid = capability.cid.parse().unwrap();
        document::reference(&key, &input(theirs, Some(cid)), RefTarget::Tombstone).unwrap()
    };
    let all = [stored.clone(), wrong.clone(), right.clone()].concat();
    assert!(rejected(&[&with(&wrong[0])], &all).contains("does not let"));
    publish(&body(&[&with(&right[0])]), &all).unwrap();
    assert!(rejected(&[&grant("READER", me)], &all).contains("role must be WRITER or AGENT"));
}

/// A home-document Ref (key of seed 32 x 0x07) and the CID `@multiformats/blake2` gives it.
#[test]
fn unnamed_blobs_get_the_blake2b_cid_the_real_server_gives() {
    let home_ref = hex::decode("a76274731b0000018bcfe56800637369675840cf95930ca91c41f9b20d5be11f0374347fc98d218e4e127eb2185ef05a2448cde22898d39d8e3cea52641413d8dd56096ceef7df2c74a0de58b8ef943a86610864747970656352656665686561647381d82a58250001711220ba8c50ed1dd60d0cdc48e9cf35160babe3c55d45fc92421c9e63a7c6dbb735df667369676e65725822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c6a67656e65726174696f6e1b0000018bcfe568006b67656e65736973426c6f62d82a5825000171122012248d52510a53c1f7c9ec84476cafa99142f7d58020b36d0cb9e885da9f7175").unwrap();
    assert_eq!(blake2b_cid(&home_ref), "bafy2bzaceaujrva66vbei2py23r7pvoje7cw7a6pwylc7cbjeluybfpr6wm32");
}
