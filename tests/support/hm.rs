//! A fake Hypermedia server on loopback: `POST /api/PublishBlobs` with a DAG-CBOR body, answered
//! in SuperJSON (`{"json": …}`), checked the way HM-INTEGRATION.md §1.4/§2.1 describe: a given
//! CID is recomputed from the data with the CID's own prefix (sha2-256; dag-cbor, raw or dag-pb),
//! a blob without one is named CIDv1 dag-cbor BLAKE2b-256 as the real server does, and a
//! DAG-CBOR blob must be canonical and carry a valid Ed25519 signature under the zero-sig rule.
//! `Change` and `Ref` blobs must also link what §2.4/§2.5 say, to blobs accepted before them
//! (earlier in the same request or in an earlier one): a content Change its genesis and its
//! `deps` with `depth` one more than theirs, a Ref its genesis and head Changes of that genesis.
//! Every accepted blob is recorded, in order; a switch makes every request fail.
//! `GET /api/Search` answers the entities a test set, and records each query string.
//!
//! Reads (`GET /api/<Key>?…`) answer what a test scripted with [`FakeHm::answer`]: the latest
//! route of that key whose parameters all match the request's (other keys 404 as on the real
//! server). Every read is recorded with its decoded query parameters. `GET /ipfs/<cid>` serves a
//! published raw leaf's bytes as `text/plain` (single-chunk files only).
//!
//! The activity feed: once a test pushes events ([`FakeHm::push_events`]), `GET /api/ListEvents`
//! pages them newest first, `pageSize` at a time, with page tokens that stay valid while newer
//! events arrive (like the real server's cursors); failures and delays can be injected, and
//! every feed request is recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use blake2::Blake2b;
use blake2::digest::consts::U32;
use ipld_core::cid::Cid;
use ipld_core::cid::multihash::Multihash;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::{Principal, wire};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One accepted blob.
#[derive(Debug, Clone)]
pub struct Published {
    pub cid: String,
    /// The multicodec of the CID (0x71 dag-cbor, 0x55 raw, 0x70 dag-pb).
    pub codec: u8,
    pub data: Vec<u8>,
    /// The decoded blob, for dag-cbor blobs.
    pub value: Option<BTreeMap<String, Ipld>>,
}

impl Published {
    pub fn field(&self, key: &str) -> Option<&Ipld> {
        self.value.as_ref()?.get(key)
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        match self.field(key)? {
            Ipld::String(text) => Some(text),
            _ => None,
        }
    }

    pub fn integer(&self, key: &str) -> Option<i128> {
        match self.field(key)? {
            Ipld::Integer(value) => Some(*value),
            _ => None,
        }
    }

    /// The CID string of a link field (`genesis`, `genesisBlob`).
    pub fn link(&self, key: &str) -> Option<String> {
        match self.field(key)? {
            Ipld::Link(cid) => Some(cid.to_string()),
            _ => None,
        }
    }

    /// The CID strings of a list-of-links field (`deps`, `heads`).
    pub fn links(&self, key: &str) -> Option<Vec<String>> {
        link_list(self.field(key)?).map(|cids| cids.iter().map(Cid::to_string).collect())
    }

    /// The signer's account id.
    pub fn signer(&self) -> Option<String> {
        match self.field("signer")? {
            Ipld::Bytes(bytes) => Principal::from_bytes(bytes).ok().map(|principal| principal.to_string()),
            _ => None,
        }
    }
}

/// One scripted read: a key, the parameters a request must carry, and the answer.
struct Route {
    key: String,
    params: Vec<(String, String)>,
    status: u16,
    body: serde_json::Value,
}

/// One read that arrived: the key and its decoded query parameters.
pub type Query = (String, BTreeMap<String, String>);

#[derive(Default)]
struct State {
    blobs: Vec<Published>,
    requests: usize,
    fail: Option<(u16, String)>,
    search: SearchState,
    routes: Vec<Route>,
    queries: Vec<Query>,
    feed: FeedState,
}

pub struct FakeHm {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeHm {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake HM");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Self { url, state, task }
    }

    /// Every accepted blob so far, in order.
    pub fn blobs(&self) -> Vec<Published> {
        self.state.lock().unwrap().blobs.clone()
    }

    /// How many requests arrived (accepted or not).
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().requests
    }

    /// Answers `GET /api/<key>` carrying at least `params` with `{"json": payload}`.
    pub fn answer(&self, key: &str, params: &[(&str, &str)], payload: serde_json::Value) {
        self.route(key, params, 200, serde_json::json!({ "json": payload }));
    }

    /// Answers `GET /api/<key>` carrying at least `params` with `status` and `{"error": message}`.
    pub fn answer_error(&self, key: &str, params: &[(&str, &str)], status: u16, message: &str) {
        self.route(key, params, status, serde_json::json!({ "error": message }));
    }

    fn route(&self, key: &str, params: &[(&str, &str)], status: u16, body: serde_json::Value) {
        let params = params.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
        self.state.lock().unwrap().routes.push(Route { key: key.to_owned(), params, status, body });
    }

    /// Every read so far, in order.
    pub fn queries(&self) -> Vec<Query> {
        self.state.lock().unwrap().queries.clone()
    }

    /// Makes every following request fail with `status` and `{"error": message}` (or succeed
    /// again with `None`).
    pub fn fail_with(&self, failure: Option<(u16, &str)>) {
        self.state.lock().unwrap().fail = failure.map(|(status, message)| (status, message.to_owned()));
    }
}

impl Drop for FakeHm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|value| value.parse().ok()).unwrap_or(0);
    while buffer.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let body = &buffer[head_end..head_end + length];
    let failure = {
        let mut state = state.lock().unwrap();
        state.requests += 1;
        state.fail.clone()
    };
    if failure.is_none()
        && method == "GET"
        && let Some(cid) = path.strip_prefix("/ipfs/")
    {
        // The gateway: a raw leaf's bytes (files of one chunk; dag-pb trees are not walked).
        let data = state
            .lock()
            .unwrap()
            .blobs
            .iter()
            .find(|blob| blob.cid == cid && blob.codec == 0x55)
            .map(|blob| blob.data.clone());
        let head = match &data {
            Some(data) => format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                data.len()
            ),
            None => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned(),
        };
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(data.as_deref().unwrap_or_default()).await;
        let _ = stream.shutdown().await;
        return;
    }
    let (status, json) = if let Some((status, message)) = failure {
        (status, serde_json::json!({ "error": message }))
    } else if method == "OPTIONS" {
        (204, serde_json::Value::Null)
    } else if method == "GET" && (path == "/api/Search" || path.starts_with("/api/Search?")) {
        search_answer(&state, &path)
    } else if method == "POST" && path == "/api/PublishBlobs" {
        if headers.get("content-type").map(String::as_str) != Some("application/cbor") {
            (400, serde_json::json!({ "error": "expected application/cbor" }))
        } else {
            let mut state = state.lock().unwrap();
            match publish(body, &state.blobs) {
                Ok(published) => {
                    let cids: Vec<String> = published.iter().map(|blob| blob.cid.clone()).collect();
                    state.blobs.extend(published);
                    (200, serde_json::json!({ "json": { "cids": cids } }))
                }
                Err(message) => (500, serde_json::json!({ "error": message })),
            }
        }
    } else if method == "GET" && path.starts_with("/api/ListEvents") && state.lock().unwrap().feed.scripted {
        feed_answer(&state, &path).await
    } else if method == "GET"
        && let Some((key, params)) = read_request(&path)
    {
        let mut state = state.lock().unwrap();
        state.queries.push((key.clone(), params.clone()));
        let route =
            state.routes.iter().rev().find(|route| {
                route.key == key && route.params.iter().all(|(name, value)| params.get(name) == Some(value))
            });
        match route {
            Some(route) => (route.status, route.body.clone()),
            None => (404, serde_json::json!({ "error": format!("no scripted answer for {key} {params:?}") })),
        }
    } else {
        (404, serde_json::json!({ "error": format!("unknown route {method} {path}") }))
    };
    let body = if status == 204 { String::new() } else { json.to_string() };
    let reason = match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Internal Server Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// `/api/<Key>?<query>` as the key and its decoded parameters.
fn read_request(path: &str) -> Option<Query> {
    let url = reqwest::Url::parse(&format!("http://fake{path}")).ok()?;
    let key = url.path().strip_prefix("/api/")?.to_owned();
    Some((key, url.query_pairs().map(|(name, value)| (name.into_owned(), value.into_owned())).collect()))
}

/// Checks every blob of a `PublishBlobs` body, in order, against those `stored` before; all or
/// nothing.
fn publish(body: &[u8], stored: &[Published]) -> Result<Vec<Published>, String> {
    let Ok(Ipld::Map(mut input)) = wire::decode_ipld(body) else { return Err("body is not a CBOR map".into()) };
    let Some(Ipld::List(blobs)) = input.remove("blobs") else { return Err("blobs must be a list".into()) };
    let mut accepted: Vec<Published> = Vec::new();
    for blob in blobs {
        let blob = check_blob(blob)?;
        let known = |cid: &Cid| {
            let cid = cid.to_string();
            stored.iter().chain(&accepted).find(|blob| blob.cid == cid).cloned()
        };
        match blob.text("type") {
            Some("Change") => check_change(&blob, known)?,
            Some("Ref") => check_ref(&blob, known)?,
            _ => {}
        }
        accepted.push(blob);
    }
    Ok(accepted)
}

fn check_blob(blob: Ipld) -> Result<Published, String> {
    let Ipld::Map(mut blob) = blob else { return Err("blob is not a map".into()) };
    let Some(Ipld::Bytes(data)) = blob.remove("data") else { return Err("blob data must be bytes".into()) };
    let (cid, codec) = match blob.remove("cid") {
        Some(Ipld::String(cid)) => {
            let codec = check_cid(&cid, &data)?;
            (cid, codec)
        }
        None => (blake2b_cid(&data), 0x71),
        Some(_) => return Err("cid must be a string".into()),
    };
    let value = match codec {
        0x71 => Some(check_signed(&data)?),
        _ => None,
    };
    Ok(Published { cid, codec, data, value })
}

/// The CID the real server gives a blob sent without one: CIDv1, dag-cbor, BLAKE2b-256
/// (multihash code 0xb220), so the string starts `bafy2bza`.
pub fn blake2b_cid(data: &[u8]) -> String {
    let digest = Blake2b::<U32>::digest(data);
    let hash = Multihash::<64>::wrap(0xb220, &digest).expect("a 32-byte digest fits");
    Cid::new_v1(0x71, hash).to_string()
}

/// A `Change`: the genesis is `{type, signer, sig, ts: 0}`; any other links a genesis Change
/// (no `genesis` of its own) and `deps` Changes of that genesis, has `depth` = max dep depth + 1
/// (the genesis has depth 0) and a body whose `opCount` counts its `ops`.
fn check_change(blob: &Published, known: impl Fn(&Cid) -> Option<Published>) -> Result<(), String> {
    let Some(genesis) = blob.field("genesis") else {
        let mut keys: Vec<&str> = blob.value.iter().flat_map(|fields| fields.keys()).map(String::as_str).collect();
        keys.sort_unstable();
        if keys != ["sig", "signer", "ts", "type"] || blob.integer("ts") != Some(0) {
            return Err(format!("a genesis Change must be {{type, signer, sig, ts: 0}}, got {keys:?}"));
        }
        return Ok(());
    };
    let Ipld::Link(genesis) = genesis else { return Err("Change genesis must be a link".into()) };
    let genesis_blob = known_change(&known, genesis, "genesis")?;
    if genesis_blob.field("genesis").is_some() {
        return Err(format!("Change genesis {genesis} is not a genesis Change"));
    }
    let deps = blob.field("deps").and_then(link_list).ok_or("Change deps must be a list of links")?;
    if deps.is_empty() {
        return Err("a content Change needs deps".into());
    }
    let mut max_dep_depth = 0;
    for dep in &deps {
        let dep_blob = known_change(&known, dep, "dep")?;
        let dep_depth = match dep_blob.link("genesis") {
            None if dep == genesis => 0,
            Some(dep_genesis) if dep_genesis == genesis.to_string() => {
                dep_blob.integer("depth").ok_or("a dep has no depth")?
            }
            _ => return Err(format!("Change dep {dep} belongs to another document")),
        };
        max_dep_depth = max_dep_depth.max(dep_depth);
    }
    if blob.integer("depth") != Some(max_dep_depth + 1) {
        return Err(format!("Change depth must be {}", max_dep_depth + 1));
    }
    let Some(Ipld::Map(body)) = blob.field("body") else { return Err("Change body must be a map".into()) };
    let Some(Ipld::List(ops)) = body.get("ops") else { return Err("Change body.ops must be a list".into()) };
    if body.get("opCount") != Some(&Ipld::Integer(ops.len() as i128)) {
        return Err("Change body.opCount must count the ops".into());
    }
    if blob.integer("ts").is_none_or(|ts| ts <= 0) {
        return Err("a content Change needs a positive ts".into());
    }
    Ok(())
}

/// A `Ref`: `genesisBlob` links a genesis Change and every head a Change of that genesis.
fn check_ref(blob: &Published, known: impl Fn(&Cid) -> Option<Published>) -> Result<(), String> {
    let Some(Ipld::Link(genesis)) = blob.field("genesisBlob") else {
        return Err("Ref genesisBlob must be a link".into());
    };
    if known_change(&known, genesis, "genesisBlob")?.field("genesis").is_some() {
        return Err(format!("Ref genesisBlob {genesis} is not a genesis Change"));
    }
    let heads = blob.field("heads").and_then(link_list).ok_or("Ref heads must be a list of links")?;
    for head in &heads {
        if known_change(&known, head, "head")?.link("genesis") != Some(genesis.to_string()) {
            return Err(format!("Ref head {head} is not a Change of genesis {genesis}"));
        }
    }
    if blob.integer("generation") == Some(0) {
        return Err("Ref generation 0 must be omitted".into());
    }
    Ok(())
}

fn known_change(known: &impl Fn(&Cid) -> Option<Published>, cid: &Cid, what: &str) -> Result<Published, String> {
    let blob = known(cid).ok_or_else(|| format!("{what} {cid} was not published before"))?;
    if blob.text("type") != Some("Change") {
        return Err(format!("{what} {cid} is not a Change"));
    }
    Ok(blob)
}

fn link_list(value: &Ipld) -> Option<Vec<Cid>> {
    let Ipld::List(items) = value else { return None };
    items.iter().map(|item| if let Ipld::Link(cid) = item { Some(*cid) } else { None }).collect()
}

/// Recomputes a `b…` CIDv1 sha2-256 from the data; returns its codec.
fn check_cid(cid: &str, data: &[u8]) -> Result<u8, String> {
    let bytes = cid.strip_prefix('b').and_then(base32_decode).ok_or("cid is not multibase base32")?;
    let [1, codec, 0x12, 0x20, digest @ ..] = bytes.as_slice() else {
        return Err(format!("cid {cid} is not CIDv1 sha2-256 with a one-byte codec"));
    };
    if ![0x71, 0x55, 0x70].contains(codec) {
        return Err(format!("unexpected codec {codec:#x}"));
    }
    if digest != Sha256::digest(data).as_slice() {
        return Err(format!("cid {cid} does not match the data"));
    }
    Ok(*codec)
}

/// Decodes, checks canonical encoding, and verifies the zero-sig Ed25519 signature.
fn check_signed(data: &[u8]) -> Result<BTreeMap<String, Ipld>, String> {
    let value = wire::decode_ipld(data).map_err(|error| format!("not DAG-CBOR: {error}"))?;
    if wire::ipld_to_vec(&value).map_err(|error| error.to_string())? != data {
        return Err("blob is not canonical DAG-CBOR".into());
    }
    let Ipld::Map(fields) = value else { return Err("blob is not a map".into()) };
    let Some(Ipld::Bytes(signer)) = fields.get("signer") else { return Err("signer must be bytes".into()) };
    let Some(Ipld::Bytes(sig)) = fields.get("sig") else { return Err("sig must be bytes".into()) };
    let principal = Principal::from_bytes(signer).map_err(|error| error.to_string())?;
    let key = principal.verifying_key().ok_or("signer is not an Ed25519 key")?;
    let signature = ed25519_dalek::Signature::from_slice(sig).map_err(|error| error.to_string())?;
    let mut unsigned = fields.clone();
    unsigned.insert("sig".into(), Ipld::Bytes(vec![0; 64]));
    let unsigned = wire::ipld_to_vec(&Ipld::Map(unsigned)).map_err(|error| error.to_string())?;
    key.verify_strict(&unsigned, &signature).map_err(|_| "invalid blob signature".to_owned())?;
    Ok(fields)
}

fn base32_decode(text: &str) -> Option<Vec<u8>> {
    let (mut out, mut buffer, mut bits) = (Vec::new(), 0u32, 0u32);
    for c in text.bytes() {
        let value = match c {
            b'a'..=b'z' => c - b'a',
            b'2'..=b'7' => c - b'2' + 26,
            _ => return None,
        };
        buffer = (buffer << 5) | u32::from(value);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::SigningKey;
    use seed_agents_server::hm::Blob;
    use seed_agents_server::hm::blob::principal;
    use seed_agents_server::hm::document;

    use super::*;

    fn body(blobs: &[&Blob]) -> Vec<u8> {
        seed_agents_server::hm::publish_blobs_body(blobs.iter().copied()).unwrap()
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
        };
        let bad_ref = document::version_ref(&other, &input).unwrap();
        assert!(rejected(&[&foreign.blob, &bad_ref], &stored).contains("is not a Change of genesis"));
    }

    /// A home-document Ref (key of seed 32 x 0x07) and the CID `@multiformats/blake2` gives it.
    #[test]
    fn unnamed_blobs_get_the_blake2b_cid_the_real_server_gives() {
        let home_ref = hex::decode("a76274731b0000018bcfe56800637369675840cf95930ca91c41f9b20d5be11f0374347fc98d218e4e127eb2185ef05a2448cde22898d39d8e3cea52641413d8dd56096ceef7df2c74a0de58b8ef943a86610864747970656352656665686561647381d82a58250001711220ba8c50ed1dd60d0cdc48e9cf35160babe3c55d45fc92421c9e63a7c6dbb735df667369676e65725822ed01ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c6a67656e65726174696f6e1b0000018bcfe568006b67656e65736973426c6f62d82a5825000171122012248d52510a53c1f7c9ec84476cafa99142f7d58020b36d0cb9e885da9f7175").unwrap();
        assert_eq!(blake2b_cid(&home_ref), "bafy2bzaceaujrva66vbei2py23r7pvoje7cw7a6pwylc7cbjeluybfpr6wm32");
    }
}

/// What `GET /api/Search` answers, and what it was asked.
#[derive(Default)]
struct SearchState {
    entities: Vec<serde_json::Value>,
    queries: Vec<BTreeMap<String, String>>,
}

impl FakeHm {
    /// Makes `GET /api/Search` answer these entities (each `{id, title, type, parentNames, …}`).
    pub fn set_search_entities(&self, entities: Vec<serde_json::Value>) {
        self.state.lock().unwrap().search.entities = entities;
    }

    /// The query parameters of every `GET /api/Search` so far, in order.
    pub fn searches(&self) -> Vec<BTreeMap<String, String>> {
        self.state.lock().unwrap().search.queries.clone()
    }
}

fn search_answer(state: &Mutex<State>, path: &str) -> (u16, serde_json::Value) {
    let query = path.split_once('?').map(|(_, query)| query).unwrap_or_default();
    let params: BTreeMap<String, String> = reqwest::Url::parse(&format!("http://x/?{query}"))
        .map(|url| url.query_pairs().map(|(key, value)| (key.into_owned(), value.into_owned())).collect())
        .unwrap_or_default();
    let mut state = state.lock().unwrap();
    let text = params.get("query").cloned().unwrap_or_default();
    state.search.queries.push(params);
    let entities = state.search.entities.clone();
    (200, serde_json::json!({ "json": { "entities": entities, "searchQuery": text, "nextPageToken": "" } }))
}

/// The scripted activity feed.
#[derive(Default)]
struct FeedState {
    /// Whether `ListEvents` answers from this feed (instead of scripted routes).
    scripted: bool,
    /// `(position, event)`, oldest first; positions only grow.
    events: Vec<(u64, serde_json::Value)>,
    requests: Vec<BTreeMap<String, String>>,
    fail: Option<(u16, String)>,
    delay: Option<std::time::Duration>,
}

impl FakeHm {
    /// Adds events at the top of the feed in this order (the last is the newest observed), and
    /// makes `ListEvents` answer from the feed.
    pub fn push_events(&self, events: impl IntoIterator<Item = serde_json::Value>) {
        let mut state = self.state.lock().unwrap();
        state.feed.scripted = true;
        for event in events {
            let position = state.feed.events.last().map_or(1, |(position, _)| position + 1);
            state.feed.events.push((position, event));
        }
    }

    /// The query parameters of every `ListEvents` the feed answered or refused, in order.
    pub fn feed_requests(&self) -> Vec<BTreeMap<String, String>> {
        self.state.lock().unwrap().feed.requests.clone()
    }

    /// Makes `ListEvents` fail with `status` and `{"error": message}` (or answer again with `None`).
    pub fn fail_feed(&self, failure: Option<(u16, &str)>) {
        let mut state = self.state.lock().unwrap();
        state.feed.scripted = true;
        state.feed.fail = failure.map(|(status, message)| (status, message.to_owned()));
    }

    /// Makes each `ListEvents` answer wait this long first (or at once with `None`).
    pub fn delay_feed(&self, delay: Option<std::time::Duration>) {
        self.state.lock().unwrap().feed.delay = delay;
    }
}

/// One page of the scripted feed: `pageSize` (default 5, as the real server) events with a
/// position below the `pageToken` (`before:<position>`), newest first.
async fn feed_answer(state: &Mutex<State>, path: &str) -> (u16, serde_json::Value) {
    let params = read_request(path).map(|(_, params)| params).unwrap_or_default();
    let delay = {
        let mut state = state.lock().unwrap();
        state.feed.requests.push(params.clone());
        state.feed.delay
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let state = state.lock().unwrap();
    if let Some((status, message)) = &state.feed.fail {
        return (*status, serde_json::json!({ "error": message }));
    }
    let size: usize = params.get("pageSize").and_then(|size| size.parse().ok()).unwrap_or(5).max(1);
    let before = match params.get("pageToken").map(|token| token.strip_prefix("before:").map(str::parse::<u64>)) {
        None => u64::MAX,
        Some(Some(Ok(position))) => position,
        Some(_) => return (400, serde_json::json!({ "error": "invalid pageToken" })),
    };
    let older: Vec<&(u64, serde_json::Value)> =
        state.feed.events.iter().rev().filter(|(position, _)| *position < before).collect();
    let page: Vec<serde_json::Value> = older.iter().take(size).map(|(_, event)| event.clone()).collect();
    let next = match older.get(size) {
        Some(_) => format!("before:{}", older[size - 1].0),
        None => String::new(),
    };
    (200, serde_json::json!({ "json": { "events": page, "nextPageToken": next } }))
}
