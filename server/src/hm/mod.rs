//! The client of the configured Hypermedia server (`--hm-server-url`).
//!
//! One route family, `/api/<Key>`: actions are `POST` with a DAG-CBOR body, and every success is
//! a SuperJSON envelope `{"json": <payload>}`; failures are non-2xx `{"error": "…"}`. The server
//! only writes through `PublishBlobs` (`{blobs: [{cid?, data}]}` → `{cids}` in request order).
//! Blob building and CIDs live in [`blob`], document Changes and Refs in [`document`], Comments
//! in [`comment`], Contacts in [`contact`], Capabilities in [`capability`], UnixFS file blocks in [`unixfs`]; [`search`]
//! is the `Search` query behind the `search` callable, and [`feed`] the `ListEvents` pages the
//! trigger monitor reads.

pub(crate) mod blob;
pub(crate) mod capability;
pub(crate) mod comment;
pub(crate) mod contact;
pub(crate) mod document;
pub(crate) mod feed;
pub(crate) mod read;
pub(crate) mod search;
pub(crate) mod unixfs;

use std::collections::BTreeMap;
use std::time::Duration;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::wire;

pub use blob::Blob;

/// How long one request to the Hypermedia server may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call to the Hypermedia server failed. The message never carries key material: blobs
/// are public and the key never reaches this module.
#[derive(Debug, thiserror::Error)]
pub enum HmError {
    /// Connecting, sending or reading failed (including the timeout).
    #[error("{0}")]
    Transport(String),
    /// The server answered non-2xx; the text mirrors the upstream client's.
    #[error("HTTP {status} from {key}: {reason}: {message}")]
    Status {
        /// The route key.
        key: &'static str,
        /// The HTTP status code.
        status: u16,
        /// The status line's reason phrase.
        reason: String,
        /// The server's `error`, or the body text.
        message: String,
    },
    /// A 2xx answer that is not the expected SuperJSON shape.
    #[error("unexpected response from {key}: {message}")]
    Response {
        /// The route key.
        key: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The request could not be encoded.
    #[error("{0}")]
    Encode(String),
}

/// A client of one Hypermedia server, over the app's outbound HTTP client.
#[derive(Debug, Clone)]
pub struct HmClient<'a> {
    http: &'a reqwest::Client,
    base: &'a str,
}

impl<'a> HmClient<'a> {
    /// A client of `base` (an origin without a trailing `/`).
    pub fn new(http: &'a reqwest::Client, base: &'a str) -> Self {
        Self { http, base }
    }

    /// The server's origin.
    pub fn base(&self) -> &str {
        self.base
    }

    /// `POST /api/PublishBlobs`: stores `blobs` atomically; their CIDs in request order.
    pub async fn publish_blobs(&self, blobs: &[Blob]) -> Result<Vec<String>, HmError> {
        let body = publish_blobs_body(blobs).map_err(|error| HmError::Encode(error.to_string()))?;
        let json = self.action("PublishBlobs", body).await?;
        let bad = |message: &str| HmError::Response { key: "PublishBlobs", message: message.to_owned() };
        let cids = json.get("cids").and_then(serde_json::Value::as_array).ok_or_else(|| bad("no cids"))?;
        let cids = cids
            .iter()
            .map(|cid| cid.as_str().map(str::to_owned).ok_or_else(|| bad("a cid is not a string")))
            .collect::<Result<Vec<_>, _>>()?;
        if cids.len() != blobs.len() {
            return Err(bad("cids do not match the blobs"));
        }
        Ok(cids)
    }

    /// Posts an action and unwraps the SuperJSON `json` payload of its answer.
    async fn action(&self, key: &'static str, body: Vec<u8>) -> Result<serde_json::Value, HmError> {
        let response = self
            .http
            .post(format!("{}/api/{key}", self.base))
            .header(reqwest::header::ACCEPT, "application/json")
            .header(reqwest::header::CONTENT_TYPE, "application/cbor")
            .timeout(REQUEST_TIMEOUT)
            .body(body)
            .send()
            .await
            .map_err(|error| HmError::Transport(crate::error::chain(&error)))?;
        read::answer(key, response).await
    }
}

/// The DAG-CBOR body of `PublishBlobs`: `{blobs: [{data, cid?}]}` in the given order.
pub fn publish_blobs_body<'a>(blobs: impl IntoIterator<Item = &'a Blob>) -> Result<Vec<u8>, wire::WireError> {
    let list = blobs
        .into_iter()
        .map(|blob| {
            let mut entry = BTreeMap::from([("data".to_owned(), Ipld::Bytes(blob.data.clone()))]);
            if let Some(cid) = &blob.cid {
                entry.insert("cid".to_owned(), Ipld::String(cid.clone()));
            }
            Ipld::Map(entry)
        })
        .collect();
    wire::ipld_to_vec(&Ipld::Map(BTreeMap::from([("blobs".to_owned(), Ipld::List(list))])))
}
