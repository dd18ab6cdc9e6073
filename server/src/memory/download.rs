//! `DownloadAgentMemoryFile`: a server-side fetch of a public http(s) URL, streamed chunk by chunk
//! into a temp file beside its target (never held whole in memory), with an idle timeout reset by
//! every chunk, then renamed into place.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;
use seed_agents_protocol::generated::AgentMemoryEntry;
use tokio::io::AsyncWriteExt;

use super::guard;
use super::mime;
use super::path::MemoryPath;
use super::store;
use crate::durable::TempFile;
use crate::error::{ApiError, ApiResult};
use crate::validate::js_trim;

/// Abort a download when no bytes arrive for this long (an idle timeout, not a total cap).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How one download runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Let the fetch reach loopback, private and link-local addresses.
    pub allow_private_network: bool,
    /// [`IDLE_TIMEOUT`] in the server; shorter in tests.
    pub idle_timeout: Duration,
    /// Now, for the `download-<ms>` default name.
    pub now_ms: i64,
    /// The bytes the storage quota leaves the owner (`crate::quota::room`): a download that
    /// passes them stops with 413 `quota_exceeded` and stores nothing. `None`: no quota.
    pub room: Option<u64>,
}

/// What a download stored.
#[derive(Debug)]
pub(crate) struct Downloaded {
    /// The file written.
    pub entry: AgentMemoryEntry,
    /// The URL fetched after redirects.
    pub final_url: String,
    /// The response's content type, when it had one.
    pub content_type: Option<String>,
}

/// Fetches `raw_url` into the memory at `root`, at `raw_path` or under `downloads/`.
pub(crate) async fn download(
    root: PathBuf,
    raw_url: &str,
    raw_path: Option<&str>,
    options: Options,
) -> ApiResult<Downloaded> {
    let url = parse_url(raw_url)?;
    let path = match raw_path {
        Some(raw) if !raw.is_empty() => MemoryPath::parse(raw)?,
        _ => MemoryPath::parse(&default_path(&url, options.now_ms))?,
    };
    if !options.allow_private_network {
        guard::check_url(&url).map_err(|blocked| refused(&blocked))?;
    }
    let client = guard::client(options.allow_private_network).map_err(ApiError::internal)?;
    let request = client.get(url.clone()).header("accept", "*/*").send();
    let mut response = match tokio::time::timeout(options.idle_timeout, request).await {
        Err(_) => return Err(could_not(&url, &format!("no response within {}", seconds(options.idle_timeout)))),
        Ok(Err(error)) => match guard::blocked_in(&error) {
            Some(blocked) => return Err(refused(blocked)),
            None => return Err(could_not(&url, &crate::error::chain(&error))),
        },
        Ok(Ok(response)) => response,
    };
    if !response.status().is_success() {
        return Err(could_not(&url, &format!("HTTP {}", response.status().as_u16())));
    }
    let content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let final_url = response.url().to_string();
    let path = with_extension(path, content_type.as_deref())?;

    let (target_root, target) = (root.clone(), path.clone());
    let (temp, file) = blocking(move || {
        let dir = store::prepare_target(&target_root, &target)?;
        let temp = TempFile::create(&dir, &store::TEMP).map_err(ApiError::internal)?;
        let file = temp.file().try_clone().map_err(ApiError::internal)?;
        Ok((temp, file))
    })
    .await?;
    let mut file = tokio::fs::File::from_std(file);
    let mut received: u64 = 0;
    loop {
        let chunk = match tokio::time::timeout(options.idle_timeout, response.chunk()).await {
            Err(_) => {
                let reason = format!("no data received for {}", seconds(options.idle_timeout));
                return Err(failed(&url, &reason));
            }
            Ok(Err(error)) => return Err(failed(&url, &crate::error::chain(&error))),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        received = received.saturating_add(chunk.len() as u64);
        if let Some(room) = options.room
            && received > room
        {
            // The temporary file goes with `temp`: nothing is stored.
            return Err(crate::quota::exceeded(format!(
                "Storage quota exceeded: the download from {url} passed the {room} bytes the quota leaves"
            )));
        }
        file.write_all(&chunk).await.map_err(ApiError::internal)?;
    }
    // Wait for tokio's last background write; `commit` fsyncs and renames on the blocking pool.
    file.flush().await.map_err(ApiError::internal)?;
    drop(file);
    let entry = blocking(move || store::commit(&root, &path, temp)).await?;
    Ok(Downloaded { entry, final_url, content_type })
}

/// Runs blocking filesystem work on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> ApiResult<T> + Send + 'static) -> ApiResult<T> {
    tokio::task::spawn_blocking(work).await.map_err(ApiError::internal)?
}

fn parse_url(raw: &str) -> ApiResult<Url> {
    let trimmed = js_trim(raw);
    if trimmed.is_empty() {
        return Err(ApiError::invalid("Download URL is required"));
    }
    let url = Url::parse(trimmed).map_err(|_| ApiError::invalid(format!("Invalid download URL: {raw}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ApiError::invalid("Download URL must use http or https"));
    }
    Ok(url)
}

/// `downloads/<last URL path segment>` (decoded, `\` and `..` replaced by `-`, at most 128
/// UTF-16 units), or `downloads/download-<ms>` when the URL has none.
pub(crate) fn default_path(url: &Url, now_ms: i64) -> String {
    let last = url.path().split('/').rfind(|segment| !segment.is_empty()).unwrap_or_default();
    let decoded = percent_decode(last);
    let replaced = decoded.replace('\\', "-").replace("..", "-");
    let mut units = 0;
    let safe: String = replaced
        .chars()
        .take_while(|c| {
            units += c.len_utf16();
            units <= 128
        })
        .collect();
    if safe.is_empty() { format!("downloads/download-{now_ms}") } else { format!("downloads/{safe}") }
}

/// `decodeURIComponent`, leaving the text as it was when it is not valid percent-encoded UTF-8.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (bytes[index], hex(index + 1), hex(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                index += 3;
            }
            (byte, ..) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// Adds an extension from the content type when the path has no 1–8 character one.
fn with_extension(path: MemoryPath, content_type: Option<&str>) -> ApiResult<MemoryPath> {
    let name = path.file_name();
    let has_extension = name
        .rsplit_once('.')
        .is_some_and(|(_, ext)| (1..=8).contains(&ext.len()) && ext.bytes().all(|byte| byte.is_ascii_alphanumeric()));
    match content_type.and_then(mime::extension_for) {
        Some(ext) if !has_extension => MemoryPath::parse(&format!("{}.{ext}", path.as_str())),
        _ => Ok(path),
    }
}

fn refused(blocked: &guard::Blocked) -> ApiError {
    ApiError::invalid(format!("Download URL is not allowed: {blocked}"))
}

fn could_not(url: &Url, reason: &str) -> ApiError {
    ApiError::upstream(format!("Could not download {url}: {reason}"))
}

fn failed(url: &Url, reason: &str) -> ApiError {
    ApiError::upstream(format!("Download of {url} failed: {reason}"))
}

fn seconds(duration: Duration) -> String {
    match duration.as_millis() {
        ms if ms % 1000 == 0 => format!("{} seconds", ms / 1000),
        ms => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn validates_urls_with_upstream_messages() {
        let message = |raw: &str| parse_url(raw).unwrap_err().message().to_owned();
        assert_eq!(message("  "), "Download URL is required");
        assert_eq!(message("not a url"), "Invalid download URL: not a url");
        assert_eq!(message("ftp://example.com/a"), "Download URL must use http or https");
        assert_eq!(message("file:///etc/passwd"), "Download URL must use http or https");
        assert!(parse_url(" https://example.com/a ").is_ok());
    }

    #[test]
    fn names_downloads_from_the_url() {
        assert_eq!(default_path(&url("https://x.test/a/b/photo.png?q=1"), 5), "downloads/photo.png");
        assert_eq!(default_path(&url("https://x.test/a/my%20file/"), 5), "downloads/my file");
        assert_eq!(default_path(&url("https://x.test/"), 5), "downloads/download-5");
        assert_eq!(default_path(&url("https://x.test/a%5C..%5Cb"), 5), "downloads/a---b");
        assert_eq!(default_path(&url("https://x.test/%ff"), 5), "downloads/%ff");
        let long = "n".repeat(300);
        assert_eq!(default_path(&url(&format!("https://x.test/{long}")), 5), format!("downloads/{}", &long[..128]));
    }

    #[test]
    fn adds_extensions_from_the_content_type() {
        let path = |raw: &str| MemoryPath::parse(raw).unwrap();
        let named = |raw: &str, content_type: Option<&str>| {
            with_extension(path(raw), content_type).unwrap().as_str().to_owned()
        };
        assert_eq!(named("downloads/photo", Some("image/png")), "downloads/photo.png");
        assert_eq!(named("downloads/photo.jpeg", Some("image/png")), "downloads/photo.jpeg");
        assert_eq!(named("notes", Some("text/plain; charset=utf-8")), "notes.txt");
        assert_eq!(named("data.toolongext", Some("application/json")), "data.toolongext.json");
        assert_eq!(named("blob", Some("application/octet-stream")), "blob");
        assert_eq!(named("blob", None), "blob");
    }

    /// A loopback server that sends headers and one chunk, then stalls.
    async fn stalling_server() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let _ = socket.read(&mut buffer).await;
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nfirst";
            socket.write_all(head.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_stalled_download_times_out_and_leaves_nothing() {
        let addr = stalling_server().await;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("memory");
        let options =
            Options { allow_private_network: true, idle_timeout: Duration::from_millis(300), now_ms: 1, room: None };
        let error = download(root.clone(), &format!("http://{addr}/slow.txt"), None, options).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Upstream);
        assert_eq!(error.message(), format!("Download of http://{addr}/slow.txt failed: no data received for 300 ms"));
        // The temp file is removed on drop (on the blocking pool).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let left: Vec<_> = std::fs::read_dir(root.join("downloads")).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn private_destinations_are_refused_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { allow_private_network: false, idle_timeout: IDLE_TIMEOUT, now_ms: 1, room: None };
        for (target, host) in [
            ("http://127.0.0.1:9/x", "127.0.0.1"),
            ("http://10.0.0.1/x", "10.0.0.1"),
            ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
            ("http://[::1]/x", "::1"),
            ("http://localhost:9/x", "localhost"),
        ] {
            let error = download(dir.path().join("memory"), target, None, options).await.unwrap_err();
            assert_eq!(
                (error.kind(), error.message()),
                (
                    ErrorKind::Invalid,
                    format!("Download URL is not allowed: {host} is a private or local network address").as_str()
                ),
                "{target}"
            );
        }
        assert!(!dir.path().join("memory").exists(), "nothing was written");
    }
}
