//! A fake Hypermedia server on loopback: `POST /api/PublishBlobs` with a DAG-CBOR body, answered
//! in SuperJSON (`{"json": …}`), checked the way HM-INTEGRATION.md §1.4/§2.1 describe: a given
//! CID is recomputed from the data with the CID's own prefix (sha2-256; dag-cbor, raw or dag-pb), and a
//! DAG-CBOR blob must be canonical and carry a valid Ed25519 signature under the zero-sig rule.
//! Every accepted blob is recorded; a switch makes every request fail.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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

    /// The signer's account id.
    pub fn signer(&self) -> Option<String> {
        match self.field("signer")? {
            Ipld::Bytes(bytes) => Principal::from_bytes(bytes).ok().map(|principal| principal.to_string()),
            _ => None,
        }
    }
}

#[derive(Default)]
struct State {
    blobs: Vec<Published>,
    requests: usize,
    fail: Option<(u16, String)>,
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
    let (status, json) = if let Some((status, message)) = failure {
        (status, serde_json::json!({ "error": message }))
    } else if method == "OPTIONS" {
        (204, serde_json::Value::Null)
    } else if method == "POST" && path == "/api/PublishBlobs" {
        if headers.get("content-type").map(String::as_str) != Some("application/cbor") {
            (400, serde_json::json!({ "error": "expected application/cbor" }))
        } else {
            match publish(body) {
                Ok(published) => {
                    let cids: Vec<String> = published.iter().map(|blob| blob.cid.clone()).collect();
                    state.lock().unwrap().blobs.extend(published);
                    (200, serde_json::json!({ "json": { "cids": cids } }))
                }
                Err(message) => (500, serde_json::json!({ "error": message })),
            }
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

/// Checks every blob of a `PublishBlobs` body; all or nothing.
fn publish(body: &[u8]) -> Result<Vec<Published>, String> {
    let Ok(Ipld::Map(mut input)) = wire::decode_ipld(body) else { return Err("body is not a CBOR map".into()) };
    let Some(Ipld::List(blobs)) = input.remove("blobs") else { return Err("blobs must be a list".into()) };
    blobs.into_iter().map(check_blob).collect()
}

fn check_blob(blob: Ipld) -> Result<Published, String> {
    let Ipld::Map(mut blob) = blob else { return Err("blob is not a map".into()) };
    let Some(Ipld::Bytes(data)) = blob.remove("data") else { return Err("blob data must be bytes".into()) };
    let (cid, codec) = match blob.remove("cid") {
        Some(Ipld::String(cid)) => {
            let codec = check_cid(&cid, &data)?;
            (cid, codec)
        }
        // The real server assigns a BLAKE2b-256 CID; a marked sha2 stand-in is enough here.
        None => (format!("unnamed-{}", hex::encode(Sha256::digest(&data))), 0x71),
        Some(_) => return Err("cid must be a string".into()),
    };
    let value = match codec {
        0x71 => Some(check_signed(&data)?),
        _ => None,
    };
    Ok(Published { cid, codec, data, value })
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
