//! Seed documents the server writes itself: `Change` blobs and `Ref` blobs (docs/hypermedia.md
//! §2.4, §2.5).
//!
//! A document starts from a genesis Change `{type, signer, sig, ts: 0}`. It has no other field,
//! so it is the same blob, with the same CID, for every document one key creates; documents are
//! told apart by their Ref's `space` and `path`. A content Change carries the ops and links the
//! genesis and its parent changes (`deps`, `depth`). Changes are named by us (sha2-256 CIDs) so
//! later blobs can link them. A Ref says what a path of an account holds: a version (its head
//! changes), nothing (a tombstone: no heads) or a redirect (no heads, a `redirect` target). Refs
//! are published without a CID: the Hypermedia server names them (BLAKE2b-256). A Ref signed for
//! another account's path links the capability that lets the signer write there.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Principal;

use super::blob::{self, Blob, BlobError};

/// The characters block ids are made of (64, so one random byte picks one without bias).
const BLOCK_ID_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/// The first three blobs of a new document, in publishing order.
#[derive(Debug, Clone)]
pub struct NewDocument {
    /// The signer's genesis Change.
    pub genesis: Change,
    /// The first content Change (`deps = [genesis]`, `depth = 1`).
    pub change: Change,
    /// The version Ref pointing at `change` (no CID: the server names it).
    pub version_ref: Blob,
}

impl NewDocument {
    /// The blobs to publish, in order: genesis, content change, version Ref.
    pub fn into_blobs(self) -> [Blob; 3] {
        [self.genesis.blob, self.change.blob, self.version_ref]
    }
}

/// A signed Change blob and its CID.
#[derive(Debug, Clone)]
pub struct Change {
    /// The blob, named with its sha2-256 CID.
    pub blob: Blob,
    /// The same CID, to link from later blobs.
    pub cid: Cid,
}

/// A block with plain text: `{type, id, text, annotations: []}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextBlock {
    /// The block type, e.g. `Paragraph`.
    pub kind: String,
    /// The block id (see [`block_id`]).
    pub id: String,
    /// The text, without formatting (an Image's alt text).
    pub text: String,
    /// What the block shows, for an `Image` (`ipfs://<cid>` or a URL); `None` for text blocks.
    pub link: Option<String>,
}

/// One operation of a content Change's body.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `SetAttributes`: document metadata, each a key path and its value.
    SetAttributes(Vec<(Vec<String>, Ipld)>),
    /// `ReplaceBlock`: writes a block's content.
    ReplaceBlock(TextBlock),
    /// `MoveBlocks`: places blocks, in this order, under `parent` (`""` = the top level).
    MoveBlocks {
        /// The block ids.
        blocks: Vec<String>,
        /// The parent block id, or `""`.
        parent: String,
    },
    /// `DeleteBlocks`: removes blocks (and their children) by id.
    DeleteBlocks(Vec<String>),
}

/// Where a version Ref points and what it says.
#[derive(Debug, Clone)]
pub struct VersionRef<'a> {
    /// The Ref's own timestamp (Unix ms).
    pub ts_ms: i64,
    /// The account whose document this is (omitted on the wire when it is the signer).
    pub space: Principal,
    /// The document path in API format: `""` for the home document (then omitted), else `/a/b`.
    pub path: &'a str,
    /// The document's genesis Change.
    pub genesis: &'a Cid,
    /// The changes that make the version.
    pub heads: &'a [Cid],
    /// The document generation (omitted on the wire when 0).
    pub generation: i64,
    /// The WRITER/AGENT capability that lets the signer write `space`'s documents (only when
    /// the signer is not `space`).
    pub capability: Option<Cid>,
}

/// What a Ref points a path at.
#[derive(Debug, Clone, Copy)]
pub enum RefTarget<'a> {
    /// A version: these head changes.
    Version(&'a [Cid]),
    /// Nothing: the document is deleted (`heads: []`).
    Tombstone,
    /// Another document (`heads: []`, `redirect: {path, space?, republish?}`).
    Redirect {
        /// The target's account (written only when it is not the Ref's `space`).
        space: Principal,
        /// The target's path in API format.
        path: &'a str,
        /// Whether readers should see the target's content at this path.
        republish: bool,
    },
}

/// An 8-character block id made from random bytes.
pub(crate) fn block_id(random: [u8; 8]) -> String {
    random.iter().map(|byte| char::from(BLOCK_ID_ALPHABET[usize::from(byte & 63)])).collect()
}

/// The ops that fill an empty document: its `name`, then each block's content, then one
/// `MoveBlocks` that places them at the top level in order.
pub fn new_document_ops(name: &str, blocks: Vec<TextBlock>) -> Vec<Op> {
    let ids = blocks.iter().map(|block| block.id.clone()).collect::<Vec<_>>();
    let mut ops = vec![Op::SetAttributes(vec![(vec!["name".to_owned()], Ipld::String(name.to_owned()))])];
    ops.extend(blocks.into_iter().map(Op::ReplaceBlock));
    if !ids.is_empty() {
        ops.push(Op::MoveBlocks { blocks: ids, parent: String::new() });
    }
    ops
}

/// The genesis Change of `key`: `{type: "Change", signer, sig, ts: 0}`.
pub fn genesis(key: &SigningKey) -> Result<Change, BlobError> {
    let fields = BTreeMap::from([text_field("type", "Change"), ("ts".to_owned(), Ipld::Integer(0))]);
    let (blob, cid) = blob::sign_named(key, fields)?;
    Ok(Change { blob, cid })
}

/// A content Change `{type, signer, sig, ts, genesis, deps, depth, body: {ops, opCount}}`.
pub fn content_change(
    key: &SigningKey,
    ts_ms: i64,
    genesis: &Cid,
    deps: &[Cid],
    depth: u64,
    ops: &[Op],
) -> Result<Change, BlobError> {
    let body = BTreeMap::from([
        ("ops".to_owned(), Ipld::List(ops.iter().map(op_value).collect())),
        ("opCount".to_owned(), Ipld::Integer(ops.len() as i128)),
    ]);
    let fields = BTreeMap::from([
        text_field("type", "Change"),
        ("ts".to_owned(), Ipld::Integer(i128::from(ts_ms))),
        ("genesis".to_owned(), Ipld::Link(*genesis)),
        ("deps".to_owned(), links(deps)),
        ("depth".to_owned(), Ipld::Integer(i128::from(depth))),
        ("body".to_owned(), Ipld::Map(body)),
    ]);
    let (blob, cid) = blob::sign_named(key, fields)?;
    Ok(Change { blob, cid })
}

/// A version Ref `{type: "Ref", signer, sig, ts, genesisBlob, heads, generation?, space?, path?,
/// capability?}`, without a CID.
pub fn version_ref(key: &SigningKey, input: &VersionRef<'_>) -> Result<Blob, BlobError> {
    reference(key, input, RefTarget::Version(input.heads))
}

/// A Ref of `input`'s path (its `heads` ignored) pointing at `target`, without a CID.
pub fn reference(key: &SigningKey, input: &VersionRef<'_>, target: RefTarget<'_>) -> Result<Blob, BlobError> {
    let heads = match target {
        RefTarget::Version(heads) => heads,
        RefTarget::Tombstone | RefTarget::Redirect { .. } => &[],
    };
    let mut fields = BTreeMap::from([
        text_field("type", "Ref"),
        ("ts".to_owned(), Ipld::Integer(i128::from(input.ts_ms))),
        ("genesisBlob".to_owned(), Ipld::Link(*input.genesis)),
        ("heads".to_owned(), links(heads)),
    ]);
    if let RefTarget::Redirect { space, path, republish } = target {
        let mut redirect = BTreeMap::from([text_field("path", path)]);
        if space != input.space {
            redirect.insert("space".to_owned(), Ipld::Bytes(space.to_bytes().to_vec()));
        }
        if republish {
            redirect.insert("republish".to_owned(), Ipld::Bool(true));
        }
        fields.insert("redirect".to_owned(), Ipld::Map(redirect));
    }
    if let Some(capability) = input.capability {
        fields.insert("capability".to_owned(), Ipld::Link(capability));
    }
    if input.generation != 0 {
        fields.insert("generation".to_owned(), Ipld::Integer(i128::from(input.generation)));
    }
    if input.space != blob::principal(key) {
        fields.insert("space".to_owned(), Ipld::Bytes(input.space.to_bytes().to_vec()));
    }
    if !input.path.is_empty() {
        fields.insert("path".to_owned(), Ipld::String(input.path.to_owned()));
    }
    Ok(Blob { cid: None, data: blob::sign(key, fields)? })
}

/// A new document of `space` at `path`, signed by `key` at `ts_ms`: the genesis, one content
/// Change with `ops`, and a version Ref whose `ts` and `generation` are the change's `ts`.
pub fn new_document(
    key: &SigningKey,
    ts_ms: i64,
    space: Principal,
    path: &str,
    ops: &[Op],
) -> Result<NewDocument, BlobError> {
    let genesis = genesis(key)?;
    let change = content_change(key, ts_ms, &genesis.cid, &[genesis.cid], 1, ops)?;
    let version_ref = version_ref(
        key,
        &VersionRef {
            ts_ms,
            space,
            path,
            genesis: &genesis.cid,
            heads: &[change.cid],
            generation: ts_ms,
            capability: None,
        },
    )?;
    Ok(NewDocument { genesis, change, version_ref })
}

fn text_field(key: &str, value: &str) -> (String, Ipld) {
    (key.to_owned(), Ipld::String(value.to_owned()))
}

fn links(cids: &[Cid]) -> Ipld {
    Ipld::List(cids.iter().copied().map(Ipld::Link).collect())
}

fn op_value(op: &Op) -> Ipld {
    let fields = match op {
        Op::SetAttributes(attrs) => {
            let attrs = attrs
                .iter()
                .map(|(key, value)| {
                    Ipld::Map(BTreeMap::from([
                        ("key".to_owned(), Ipld::List(key.iter().cloned().map(Ipld::String).collect())),
                        ("value".to_owned(), value.clone()),
                    ]))
                })
                .collect();
            vec![text_field("type", "SetAttributes"), ("attrs".to_owned(), Ipld::List(attrs))]
        }
        Op::ReplaceBlock(block) => {
            let mut fields = BTreeMap::from([
                text_field("type", &block.kind),
                text_field("id", &block.id),
                text_field("text", &block.text),
                ("annotations".to_owned(), Ipld::List(Vec::new())),
            ]);
            if let Some(link) = &block.link {
                fields.insert("link".to_owned(), Ipld::String(link.clone()));
            }
            vec![text_field("type", "ReplaceBlock"), ("block".to_owned(), Ipld::Map(fields))]
        }
        Op::MoveBlocks { blocks, parent } => vec![
            text_field("type", "MoveBlocks"),
            ("blocks".to_owned(), Ipld::List(blocks.iter().cloned().map(Ipld::String).collect())),
            text_field("parent", parent),
        ],
        Op::DeleteBlocks(blocks) => vec![
            text_field("type", "DeleteBlocks"),
            ("blocks".to_owned(), Ipld::List(blocks.iter().cloned().map(Ipld::String).collect())),
        ],
    };
    Ipld::Map(fields.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors made with @ipld/dag-cbor 9, multiformats 13, @multiformats/blake2 2 and
    // @noble/curves 2 following the upstream client's recipe (change.ts, ref.ts), for the key
    // of seed 32 x 0x07, ts 1700000000000, name "Test Agent" and block id "AbCd_-12".
    const GENESIS: &str = "a462747300637369675840b474cff20c17bc653d0faed45ca898348e36227dd4b63af89719196d7210990d62f37ac39f57953016e861ee1a72a114d6e2a8d5c757e9f3fed07ab3f41dfa0b6474797065664368616e6765667369676e65725822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c";
    const GENESIS_CID: &str = "bafyreiasesgveuikkpa7pspmqrdwzl5jsfbppvmaeczw2dfz5cc5vh3rou";
    const CHANGE: &str = "a86274731b0000018bcfe568006373696758407a19097e02ae8870dc2d9655826c8f7bd5aad4f6d5c610ef0255f2f9c5d3daf96401eefbfb003f13d2c719243eb392b4f4e7503c1ffdb94245cbd738d769490164626f6479a2636f707383a264747970656d5365744174747269627574657365617474727381a2636b657981646e616d656576616c75656a54657374204167656e74a264747970656c5265706c616365426c6f636b65626c6f636ba462696468416243645f2d31326474657874781b5468697320697320616e206167656e746963206163636f756e742e6474797065695061726167726170686b616e6e6f746174696f6e7380a364747970656a4d6f7665426c6f636b7366626c6f636b738168416243645f2d313266706172656e7460676f70436f756e7403646465707381d82a5825000171122012248d52510a53c1f7c9ec84476cafa99142f7d58020b36d0cb9e885da9f71756474797065664368616e676565646570746801667369676e65725822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c6767656e65736973d82a5825000171122012248d52510a53c1f7c9ec84476cafa99142f7d58020b36d0cb9e885da9f7175";
    const CHANGE_CID: &str = "bafyreif2rrio2howbugnyshjz42rmc5l4pcv2rp4sjbbzhtdu7dnxnzv34";
    const HOME_REF: &str = "a76274731b0000018bcfe56800637369675840cf95930ca91c41f9b20d5be11f0374347fc98d218e4e127eb2185ef05a2448cde22898d39d8e3cea52641413d8dd56096ceef7df2c74a0de58b8ef943a86610864747970656352656665686561647381d82a58250001711220ba8c50ed1dd60d0cdc48e9cf35160babe3c55d45fc92421c9e63a7c6dbb735df667369676e65725822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c6a67656e65726174696f6e1b0000018bcfe568006b67656e65736973426c6f62d82a5825000171122012248d52510a53c1f7c9ec84476cafa99142f7d58020b36d0cb9e885da9f7175";
    const TS: i64 = 1_700_000_000_000;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7; 32])
    }

    fn home_ops() -> Vec<Op> {
        let paragraph = TextBlock {
            kind: "Paragraph".to_owned(),
            id: "AbCd_-12".to_owned(),
            text: "This is an agentic account.".to_owned(),
            link: None,
        };
        new_document_ops("Test Agent", vec![paragraph])
    }

    #[test]
    fn genesis_is_deterministic_per_signer() {
        let first = genesis(&key()).unwrap();
        assert_eq!(hex(&first.blob.data), GENESIS);
        assert_eq!(first.blob.cid.as_deref(), Some(GENESIS_CID));
        assert_eq!(first.cid.to_string(), GENESIS_CID);
        let again = genesis(&key()).unwrap();
        assert_eq!((again.blob, again.cid), (first.blob, first.cid));
        let other = genesis(&SigningKey::from_bytes(&[8; 32])).unwrap();
        assert_ne!(other.cid, first.cid);
    }

    #[test]
    fn new_home_document_matches_the_upstream_recipe() {
        let key = key();
        let document = new_document(&key, TS, blob::principal(&key), "", &home_ops()).unwrap();
        assert_eq!(document.genesis.cid.to_string(), GENESIS_CID);
        assert_eq!(hex(&document.change.blob.data), CHANGE);
        assert_eq!(document.change.blob.cid.as_deref(), Some(CHANGE_CID));
        assert_eq!(document.change.cid.to_string(), CHANGE_CID);
        // The Ref has no client CID; the server computes a BLAKE2b-256 one.
        assert_eq!(document.version_ref.cid, None);
        assert_eq!(hex(&document.version_ref.data), HOME_REF);
        let blobs = document.into_blobs();
        assert_eq!(blobs.iter().map(|blob| blob.cid.is_some()).collect::<Vec<_>>(), [true, true, false]);
    }

    #[test]
    fn a_ref_names_another_space_a_path_and_omits_generation_zero() {
        let key = key();
        let genesis = genesis(&key).unwrap();
        let space = blob::principal(&SigningKey::from_bytes(&[8; 32]));
        let input = VersionRef {
            ts_ms: 5,
            space,
            path: "/notes",
            genesis: &genesis.cid,
            heads: &[],
            generation: 0,
            capability: Some(genesis.cid),
        };
        let data = version_ref(&key, &input).unwrap().data;
        let Ok(Ipld::Map(fields)) = seed_agents_protocol::wire::decode_ipld(&data) else { panic!("not a map") };
        assert_eq!(fields.get("space"), Some(&Ipld::Bytes(space.to_bytes().to_vec())));
        assert_eq!(fields.get("path"), Some(&Ipld::String("/notes".to_owned())));
        assert_eq!(fields.get("heads"), Some(&Ipld::List(Vec::new())));
        assert_eq!(fields.get("generation"), None);
        assert_eq!(fields.get("ts"), Some(&Ipld::Integer(5)));
        assert_eq!(fields.get("capability"), Some(&Ipld::Link(genesis.cid)));
        assert_eq!(fields.get("redirect"), None);
    }

    #[test]
    fn tombstones_and_redirects_have_no_heads() {
        let key = key();
        let genesis = genesis(&key).unwrap();
        let me = blob::principal(&key);
        let heads = [genesis.cid];
        let input = VersionRef {
            ts_ms: 5,
            space: me,
            path: "/a",
            genesis: &genesis.cid,
            heads: &heads,
            generation: 7,
            capability: None,
        };
        let decode = |target| {
            let data = reference(&key, &input, target).unwrap().data;
            let Ok(Ipld::Map(fields)) = seed_agents_protocol::wire::decode_ipld(&data) else { panic!("not a map") };
            fields
        };
        let tombstone = decode(RefTarget::Tombstone);
        assert_eq!(tombstone.get("heads"), Some(&Ipld::List(Vec::new())));
        assert_eq!(tombstone.get("redirect"), None);
        assert_eq!(tombstone.get("generation"), Some(&Ipld::Integer(7)));
        let same = decode(RefTarget::Redirect { space: me, path: "/b", republish: false });
        assert_eq!(same.get("heads"), Some(&Ipld::List(Vec::new())));
        assert_eq!(same.get("redirect"), Some(&Ipld::Map(BTreeMap::from([text_field("path", "/b")]))));
        let other = blob::principal(&SigningKey::from_bytes(&[8; 32]));
        let elsewhere = decode(RefTarget::Redirect { space: other, path: "", republish: true });
        let Some(Ipld::Map(redirect)) = elsewhere.get("redirect") else { panic!("no redirect") };
        assert_eq!(redirect.get("space"), Some(&Ipld::Bytes(other.to_bytes().to_vec())));
        assert_eq!(redirect.get("republish"), Some(&Ipld::Bool(true)));
        assert_eq!(decode(RefTarget::Version(&heads)).get("heads"), Some(&links(&heads)));
    }

    #[test]
    fn new_document_ops_set_the_name_first_and_place_blocks_last() {
        let ops = home_ops();
        assert!(matches!(&ops[0], Op::SetAttributes(attrs) if attrs.len() == 1));
        assert!(matches!(&ops[1], Op::ReplaceBlock(block) if block.id == "AbCd_-12"));
        assert_eq!(ops[2], Op::MoveBlocks { blocks: vec!["AbCd_-12".to_owned()], parent: String::new() });
        assert_eq!(new_document_ops("Empty", Vec::new()).len(), 1);
    }

    #[test]
    fn block_ids_use_the_64_character_alphabet() {
        assert_eq!(block_id([0, 1, 25, 26, 52, 62, 63, 64]), "ABZa0_-A");
        assert_eq!(block_id([255; 8]), "--------");
    }
}
