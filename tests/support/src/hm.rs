//! A fake Hypermedia server on loopback: `POST /api/PublishBlobs` with a DAG-CBOR body, answered
//! in SuperJSON (`{"json": …}`), checked the way docs/hypermedia.md §1.4/§2.1 describe: a given
//! CID is recomputed from the data with the CID's own prefix (sha2-256; dag-cbor, raw or dag-pb),
//! a blob without one is named CIDv1 dag-cbor BLAKE2b-256 as the real server does, and a
//! DAG-CBOR blob must be canonical and carry a valid Ed25519 signature under the zero-sig rule.
//! `Change`, `Ref`, `Comment` and `Capability` blobs must also carry the fields §2.3–§2.6 say
//! and link blobs accepted before them (earlier in the same request or in an earlier one): a
//! content Change its genesis and its `deps` with `depth` one more than theirs; a Ref its genesis
//! and head Changes of that genesis, no heads when it redirects, and, when it writes another
//! account's path, a WRITER/AGENT Capability that account issued to the Ref's signer (covering
//! that path when it names one); a Comment the Changes of the version it is about and, for a
//! reply, the parent and thread-root Comments on the same document (the checks are in
//! `hm/blobs.rs`). Every accepted blob is recorded, in order; a switch makes every request fail.
//! Tests seed blobs signed by other keys with [`FakeHm::store`]. `GET /api/Search` answers the
//! entities a test set, and records each query string.
//!
//! Reads (`GET /api/<Key>?…`) answer what a test scripted with [`FakeHm::answer`]: the latest
//! route of that key whose parameters all match the request's (other keys 404 as on the real
//! server); `Comment?__value=<author>/<tsid>` with no scripted route answers from the published
//! Comments, naming each by the record id the fake computes itself (500 for an unknown one, as
//! the real server's throwing read). Every read is recorded with its decoded query parameters.
//! `GET /ipfs/<cid>` serves a published raw leaf's bytes as `text/plain` (single-chunk files
//! only).
//!
//! `GET /api/Query` with no scripted route answers from the documents a test listed with
//! [`FakeHm::set_documents`], as the real server does: the `includes` entry's space and path,
//! `Children` one level down or `AllDescendants` the whole subtree, the first `sort` term
//! (`reverse` flips it), then `limit`; each result `{id: {id, uid, path}, path, metadata,
//! createTime, updateTime}` under `{in, results, mode}`.
//!
//! The activity feed: once a test pushes events ([`FakeHm::push_events`]), `GET /api/ListEvents`
//! pages them newest first, `pageSize` at a time, with page tokens that stay valid while newer
//! events arrive (like the real server's cursors); failures and delays can be injected, and
//! every feed request is recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ipld_core::cid::Cid;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::Principal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub mod blobs;

pub use blobs::comment_record_id;
use blobs::{comment_answer, link_list, publish};

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
    documents: Vec<serde_json::Value>,
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

    /// Publishes `blobs` as a `PublishBlobs` request would (same checks, all or nothing); their
    /// CIDs, or why they were refused.
    pub fn store(&self, blobs: &[&seed_agents_server::testing::hm::Blob]) -> Result<Vec<String>, String> {
        let body =
            seed_agents_server::testing::hm::publish_blobs_body(blobs.iter().copied()).map_err(|e| e.to_string())?;
        let mut state = self.state.lock().unwrap();
        let published = publish(&body, &state.blobs)?;
        let cids = published.iter().map(|blob| blob.cid.clone()).collect();
        state.blobs.extend(published);
        Ok(cids)
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
        match (route, key.as_str(), params.get("__value")) {
            (Some(route), ..) => (route.status, route.body.clone()),
            (None, "Query", _) => (200, serde_json::json!({ "json": directory_answer(&state.documents, &params) })),
            (None, "Comment", Some(id)) => match comment_answer(&state.blobs, id) {
                Some(comment) => (200, serde_json::json!({ "json": comment })),
                None => (500, serde_json::json!({ "error": format!("comment {id} not found") })),
            },
            (None, ..) => (404, serde_json::json!({ "error": format!("no scripted answer for {key} {params:?}") })),
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

impl FakeHm {
    /// The documents `GET /api/Query` lists: each `{account, path: "/a/b", metadata?,
    /// createTime?, updateTime?}`.
    pub fn set_documents(&self, documents: Vec<serde_json::Value>) {
        self.state.lock().unwrap().documents = documents;
    }
}

/// A `Query` answer from the listed documents (see the module documentation).
fn directory_answer(documents: &[serde_json::Value], params: &BTreeMap<String, String>) -> serde_json::Value {
    use serde_json::{Value, json};
    let parse = |name: &str| params.get(name).and_then(|text| serde_json::from_str::<Value>(text).ok());
    let Some(include) = parse("includes").and_then(|includes| includes.get(0).cloned()) else {
        return Value::Null;
    };
    let space = include["space"].as_str().unwrap_or_default();
    let segments = |path: &str| -> Vec<String> {
        path.split('/').filter(|segment| !segment.is_empty()).map(str::to_owned).collect()
    };
    let base = segments(include["path"].as_str().unwrap_or_default());
    let mode = include["mode"].as_str().unwrap_or("Children");
    let mut found: Vec<&Value> = documents
        .iter()
        .filter(|document| document["account"].as_str() == Some(space))
        .filter(|document| {
            let path = segments(document["path"].as_str().unwrap_or_default());
            path.len() > base.len()
                && path[..base.len()] == base[..]
                && (mode == "AllDescendants" || path.len() == base.len() + 1)
        })
        .collect();
    if let Some(sort) = parse("sort").and_then(|sort| sort.get(0).cloned()) {
        let key = |document: &Value| -> String {
            match sort["term"].as_str() {
                Some("Path") => document["path"].as_str().unwrap_or_default().to_owned(),
                Some("Title") => document["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                Some("CreateTime") => document["createTime"].as_str().unwrap_or_default().to_owned(),
                _ => document["updateTime"].as_str().unwrap_or_default().to_owned(),
            }
        };
        found.sort_by_key(|document| key(document));
        if sort["reverse"].as_bool() == Some(true) {
            found.reverse();
        }
    }
    if let Some(limit) = parse("limit").and_then(|limit| limit.as_u64()) {
        found.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    let results: Vec<Value> = found
        .iter()
        .map(|document| {
            let path = segments(document["path"].as_str().unwrap_or_default());
            let id = format!("hm://{space}/{}", path.join("/"));
            let mut result = json!({
                "id": { "id": id, "uid": space, "path": path },
                "path": path,
                "metadata": document.get("metadata").cloned().unwrap_or_else(|| json!({})),
            });
            for time in ["createTime", "updateTime"] {
                if let Some(value) = document.get(time) {
                    result[time] = value.clone();
                }
            }
            result
        })
        .collect();
    json!({ "in": { "id": format!("hm://{space}"), "uid": space, "path": base }, "results": results, "mode": mode })
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
        // A scripted slow feed (`delay_feed`): the behaviour a test asked for.
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
