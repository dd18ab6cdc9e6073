//! Seed comments the server writes itself: the `Comment` blob and its record id
//! (docs/hypermedia.md §2.3).
//!
//! A comment names the document it is about by `space` (the account's principal bytes), `path`
//! (API format) and `version` (the document version's change CIDs, as links); a reply also links
//! the parent comment's version (`replyParent`) and the thread's root comment version
//! (`threadRoot`). Its `body` is a list of publishable blocks: each block's fields at the top
//! level with its `children` nested. The blob is published without a CID (the Hypermedia server
//! names it, BLAKE2b-256); the comment's record id `<author>/<tsid>` is computed here from the
//! signed bytes.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;
use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Principal;
use sha2::{Digest, Sha256};

use super::blob::{self, Blob, BlobError};
use super::document::TextBlock;

/// What a new comment says and what it is about.
#[derive(Debug, Clone)]
pub struct NewComment<'a> {
    /// The comment's timestamp (Unix ms).
    pub ts_ms: i64,
    /// The account whose document is commented on.
    pub space: Principal,
    /// The document path in API format (`""` for the home document).
    pub path: &'a str,
    /// The document version commented on: its change CIDs (a version string split on `.`).
    pub version: &'a [Cid],
    /// The comment's blocks, top level, in order.
    pub body: &'a [TextBlock],
    /// For a reply: the parent comment's version CID.
    pub reply_parent: Option<Cid>,
    /// For a reply: the thread's root comment version CID.
    pub thread_root: Option<Cid>,
    /// A comment on a private document is private too (`visibility: "Private"`).
    pub private: bool,
    /// For an edit or a deletion (an empty `body`): the tsid of the signer's comment it replaces,
    /// which keeps its record id.
    pub edits: Option<&'a str>,
}

/// A signed comment blob and the record id that names it.
#[derive(Debug, Clone)]
pub struct SignedComment {
    /// The blob, without a CID.
    pub blob: Blob,
    /// `<author uid>/<tsid>` (see [`record_id`]).
    pub id: String,
}

/// A signed `Comment` blob `{type, signer, sig, ts, space, path, version, body, replyParent?,
/// threadRoot?, visibility?, id?}` and its record id: the edited comment's when `edits` names
/// one (a later blob with the same `id` replaces it; one with an empty body deletes it).
pub fn comment(key: &SigningKey, input: &NewComment<'_>) -> Result<SignedComment, BlobError> {
    let mut fields = BTreeMap::from([
        ("type".to_owned(), Ipld::String("Comment".to_owned())),
        ("ts".to_owned(), Ipld::Integer(i128::from(input.ts_ms))),
        ("space".to_owned(), Ipld::Bytes(input.space.to_bytes().to_vec())),
        ("path".to_owned(), Ipld::String(input.path.to_owned())),
        ("version".to_owned(), Ipld::List(input.version.iter().copied().map(Ipld::Link).collect())),
        ("body".to_owned(), Ipld::List(input.body.iter().map(publishable).collect())),
    ]);
    if let Some(parent) = input.reply_parent {
        fields.insert("replyParent".to_owned(), Ipld::Link(parent));
    }
    if let Some(root) = input.thread_root {
        fields.insert("threadRoot".to_owned(), Ipld::Link(root));
    }
    if input.private {
        fields.insert("visibility".to_owned(), Ipld::String("Private".to_owned()));
    }
    if let Some(tsid) = input.edits {
        fields.insert("id".to_owned(), Ipld::String(tsid.to_owned()));
    }
    let data = blob::sign(key, fields)?;
    let id = match input.edits {
        Some(tsid) => format!("{}/{tsid}", blob::principal(key)),
        None => record_id(&blob::principal(key), input.ts_ms, &data),
    };
    Ok(SignedComment { blob: Blob { cid: None, data }, id })
}

/// A comment's record id `<author uid>/<tsid>`: the tsid is multibase base58btc (`z…`) of ten
/// bytes, the low 48 bits of `ts_ms` big-endian then the first four bytes of SHA-256 of the
/// signed blob bytes.
pub(crate) fn record_id(author: &Principal, ts_ms: i64, data: &[u8]) -> String {
    let mut tsid = [0u8; 10];
    tsid[..6].copy_from_slice(&ts_ms.to_be_bytes()[2..]);
    tsid[6..].copy_from_slice(&Sha256::digest(data)[..4]);
    format!("{author}/z{}", bs58::encode(tsid).into_string())
}

/// A block as a publishable comment block: `{id, type, text, annotations: [], children: []}`,
/// and `link` for an Image.
fn publishable(block: &TextBlock) -> Ipld {
    let mut fields = BTreeMap::from([
        ("id".to_owned(), Ipld::String(block.id.clone())),
        ("type".to_owned(), Ipld::String(block.kind.clone())),
        ("text".to_owned(), Ipld::String(block.text.clone())),
        ("annotations".to_owned(), Ipld::List(Vec::new())),
        ("children".to_owned(), Ipld::List(Vec::new())),
    ]);
    if let Some(link) = &block.link {
        fields.insert("link".to_owned(), Ipld::String(link.clone()));
    }
    Ipld::Map(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use seed_agents_protocol::wire;

    fn paragraph(text: &str) -> TextBlock {
        TextBlock { kind: "Paragraph".to_owned(), id: "AbCd_-12".to_owned(), text: text.to_owned(), link: None }
    }

    #[test]
    fn a_comment_links_its_document_version_and_names_itself_by_tsid() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let space = blob::principal(&SigningKey::from_bytes(&[8; 32]));
        let version = [blob::cid_v1_sha256(blob::DAG_CBOR, b"a"), blob::cid_v1_sha256(blob::DAG_CBOR, b"b")];
        let body = [paragraph("Nice heron.")];
        let input = NewComment {
            ts_ms: 1_700_000_000_000,
            space,
            path: "/notes",
            version: &version,
            body: &body,
            reply_parent: None,
            thread_root: None,
            private: false,
            edits: None,
        };
        let signed = comment(&key, &input).unwrap();
        assert_eq!(signed.blob.cid, None);
        let Ok(Ipld::Map(fields)) = wire::decode_ipld(&signed.blob.data) else { panic!("not a map") };
        let mut keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["body", "path", "sig", "signer", "space", "ts", "type", "version"]);
        assert_eq!(fields["version"], Ipld::List(version.iter().copied().map(Ipld::Link).collect()));
        assert_eq!(fields["space"], Ipld::Bytes(space.to_bytes().to_vec()));
        let Ipld::List(blocks) = &fields["body"] else { panic!("no body") };
        let Ipld::Map(block) = &blocks[0] else { panic!("not a block") };
        assert_eq!(block["children"], Ipld::List(Vec::new()));
        assert_eq!(block["text"], Ipld::String("Nice heron.".to_owned()));

        // The tsid: 6 bytes of ts (0x018bcfe56800) then SHA-256 of the bytes, base58btc.
        let (author, tsid) = signed.id.split_once('/').unwrap();
        assert_eq!(author, blob::principal(&key).to_string());
        let raw = bs58::decode(tsid.strip_prefix('z').unwrap()).into_vec().unwrap();
        assert_eq!(raw[..6], [0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00]);
        assert_eq!(raw[6..], Sha256::digest(&signed.blob.data)[..4]);

        let reply =
            NewComment { reply_parent: Some(version[0]), thread_root: Some(version[1]), private: true, ..input };
        let Ok(Ipld::Map(fields)) = wire::decode_ipld(&comment(&key, &reply).unwrap().blob.data) else {
            panic!("not a map")
        };
        assert_eq!(fields["replyParent"], Ipld::Link(version[0]));
        assert_eq!(fields["threadRoot"], Ipld::Link(version[1]));
        assert_eq!(fields["visibility"], Ipld::String("Private".to_owned()));

        // An edit keeps the record id it names, whatever its own bytes hash to.
        let edit = NewComment { edits: Some(tsid), ts_ms: input.ts_ms + 5, ..input };
        let edited = comment(&key, &edit).unwrap();
        assert_eq!(edited.id, signed.id);
        let Ok(Ipld::Map(fields)) = wire::decode_ipld(&edited.blob.data) else { panic!("not a map") };
        assert_eq!(fields["id"], Ipld::String(tsid.to_owned()));
    }
}
