//! The client: one hand-written `send` that signs, posts and decodes; typed calls build on it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backon::BackoffBuilder as _;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::Error as ErrorResponse;
use seed_agents_protocol::version::{AGENTS_PROTOCOL_HEADER, AGENTS_PROTOCOL_VERSION, PROTOCOL_TOO_OLD};
use seed_agents_protocol::{
    Action, AgentAction, AgentResponse, Effect, Principal, Response, Signer, UnsignedEnvelope, wire,
};

use crate::Error;
use crate::error::{DecodeError, ErrorCode};

/// How long connecting may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one read (`x-effect: read`: send and whole answer) may take by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one write may take by default: longer, because some writes wait for work (a
/// `MessageSession` answers when the agent's turn ends, an upload chunk carries 8 MiB).
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(600);
/// How many times a call that is safe to repeat is sent again after a transport failure, by
/// default.
pub const DEFAULT_MAX_RETRIES: usize = 3;

/// The longest `Retry-After` a call waits out by itself; a server asking for longer gets its
/// [`ErrorCode::RateLimited`](crate::ErrorCode::RateLimited) error handed to the caller at once.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A source of the current time in Unix milliseconds (the `ts` of each action).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// A client of one Seed Agents server, acting for one account.
///
/// Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: String,
    signer: Arc<dyn Signer>,
    account: Principal,
    protocol: Option<u32>,
    clock: Clock,
    /// The last `X-Agents-Protocol` the server sent (0 until the first answer).
    server_protocol: Arc<AtomicU32>,
    /// The last `ts` signed; the next is at least one more, so two identical actions sent in
    /// the same millisecond are still different envelopes (servers refuse byte-identical
    /// replays of writes).
    last_ts: Arc<AtomicI64>,
    /// The limit for one read, `None` for none.
    request_timeout: Option<Duration>,
    /// The limit for one write (and for untyped posts), `None` for none.
    write_timeout: Option<Duration>,
    /// Resends after transport failures, for calls that are safe to repeat.
    max_retries: usize,
    /// Whether `call` fills an absent `clientRequestId`/`clientMessageId` with a fresh key.
    generate_keys: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("signer", &self.signer.principal())
            .field("account", &self.account)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Client`] with non-default settings.
pub struct ClientBuilder {
    server_url: String,
    signer: Arc<dyn Signer>,
    account: Option<Principal>,
    protocol: Option<u32>,
    clock: Option<Clock>,
    http: Option<reqwest::Client>,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    max_retries: usize,
    generate_keys: bool,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder").field("server_url", &self.server_url).finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Acts for `account` (an account that authorized the signer) instead of the signer's own.
    pub fn account(mut self, account: Principal) -> Self {
        self.account = Some(account);
        self
    }

    /// Declares another protocol version in each envelope; `None` leaves the field out (which a
    /// server reads as protocol 1). The default is this build's `AGENTS_PROTOCOL_VERSION`.
    pub fn protocol(mut self, protocol: Option<u32>) -> Self {
        self.protocol = protocol;
        self
    }

    /// Uses another clock for `ts` (tests, or a device with a known offset).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Uses a preconfigured HTTP client (proxies, extra root certificates); its own connect
    /// timeout replaces [`ClientBuilder::connect_timeout`].
    pub fn http_client(mut self, http: reqwest::Client) -> Self {
        self.http = Some(http);
        self
    }

    /// How long connecting may take (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request may take, sending it and reading the whole answer, reads and writes
    /// alike (`None`: no limit). By default reads get [`DEFAULT_REQUEST_TIMEOUT`] and writes
    /// [`DEFAULT_WRITE_TIMEOUT`]. [`Client::with_timeout`] overrides it per call.
    pub fn request_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.request_timeout = timeout;
        self.write_timeout = timeout;
        self
    }

    /// How long one write may take (default [`DEFAULT_WRITE_TIMEOUT`]; `None`: no limit); set it
    /// after [`ClientBuilder::request_timeout`].
    pub fn write_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// How many times a call that is safe to repeat is sent again after a transport failure
    /// (no answer, a timeout), with exponential back-off and jitter (default
    /// [`DEFAULT_MAX_RETRIES`]; 0 turns retries off). Safe: reads (`x-effect: read`) and writes
    /// that carry their idempotency key (`clientRequestId`/`clientMessageId`).
    pub fn max_retries(mut self, retries: usize) -> Self {
        self.max_retries = retries;
        self
    }

    /// Whether [`Client::call`] fills an absent `clientRequestId`/`clientMessageId` with a fresh
    /// random key (default on), which makes those writes safe to retry.
    pub fn generate_idempotency_keys(mut self, generate: bool) -> Self {
        self.generate_keys = generate;
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<Client, Error> {
        let endpoint = message_endpoint(&self.server_url)?;
        let http = match self.http {
            Some(http) => http,
            None => http_client(self.connect_timeout)?,
        };
        Ok(Client {
            http,
            endpoint,
            account: self.account.unwrap_or_else(|| self.signer.principal()),
            signer: self.signer,
            protocol: self.protocol,
            clock: self.clock.unwrap_or_else(|| Arc::new(now_ms)),
            server_protocol: Arc::new(AtomicU32::new(0)),
            last_ts: Arc::new(AtomicI64::new(i64::MIN)),
            request_timeout: self.request_timeout,
            write_timeout: self.write_timeout,
            max_retries: self.max_retries,
            generate_keys: self.generate_keys,
        })
    }
}

impl Client {
    /// A client of the server at `server_url` (e.g. `http://127.0.0.1:3050`), acting for the
    /// signer's own account.
    pub fn new(server_url: &str, signer: impl Signer + 'static) -> Result<Client, Error> {
        Client::builder(server_url, signer).build()
    }

    /// A builder for a client with non-default settings.
    pub fn builder(server_url: &str, signer: impl Signer + 'static) -> ClientBuilder {
        ClientBuilder {
            server_url: server_url.to_owned(),
            signer: Arc::new(signer),
            account: None,
            protocol: Some(AGENTS_PROTOCOL_VERSION),
            clock: None,
            http: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            write_timeout: Some(DEFAULT_WRITE_TIMEOUT),
            max_retries: DEFAULT_MAX_RETRIES,
            generate_keys: true,
        }
    }

    /// The account this client acts for.
    pub fn account(&self) -> Principal {
        self.account
    }

    /// The URL actions are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The protocol version the server reported in its last answer (`None` before any answer).
    pub fn server_protocol(&self) -> Option<u32> {
        match self.server_protocol.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// This client with another request timeout for reads and writes, for the calls made
    /// through it (a cheap clone sharing the connection pool).
    ///
    /// ```no_run
    /// # async fn run(client: seed_agents_sdk::Client) -> Result<(), seed_agents_sdk::Error> {
    /// use std::time::Duration;
    /// use seed_agents_sdk::types::ListAgents;
    /// let agents = client.with_timeout(Duration::from_secs(5)).list_agents(ListAgents::new()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client { request_timeout: Some(timeout), write_timeout: Some(timeout), ..self.clone() }
    }

    /// This client with another retry count (see [`ClientBuilder::max_retries`]).
    pub fn with_max_retries(&self, retries: usize) -> Client {
        Client { max_retries: retries, ..self.clone() }
    }

    /// Sends one typed action and returns its typed response.
    ///
    /// A read, or a write carrying its idempotency key (filled with a fresh one when absent, see
    /// [`ClientBuilder::generate_idempotency_keys`]), is sent again after a transport failure,
    /// newly signed, up to [`ClientBuilder::max_retries`] times with jittered back-off.
    pub async fn call<A: Action>(&self, action: A) -> Result<A::Response, Error> {
        let mut map = match wire::to_ipld(&action.into_action()).map_err(|e| Error::Sign(e.into()))? {
            Ipld::Map(map) => map,
            _ => unreachable_action(),
        };
        if let Some(key) = A::IDEMPOTENCY_KEY
            && self.generate_keys
            && !map.contains_key(key)
        {
            map.insert(key.to_owned(), Ipld::String(idempotency_key()));
        }
        let safe = A::EFFECT == Effect::Read || A::IDEMPOTENCY_KEY.is_some_and(|key| map.contains_key(key));
        let retries = if safe { self.max_retries } else { 0 };
        let mut delays = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .with_jitter()
            .with_max_times(retries)
            .build();
        // A rate-limit refusal was decided before the action ran, so any call, safe or not, may
        // be sent again once the server's `Retry-After` has passed.
        let mut rate_limited = 0;
        let answer = loop {
            let (body, _) = self.sign_map(map.clone()).await?;
            let timeout = if A::EFFECT == Effect::Read { self.request_timeout } else { self.write_timeout };
            match self.exchange(body, timeout).await {
                Err(error) if error.is_transport() => match delays.next() {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => return Err(error),
                },
                Err(error) if error.code() == Some(ErrorCode::RateLimited) && rate_limited < self.max_retries => {
                    match error.retry_after() {
                        Some(wait) if wait <= MAX_RETRY_AFTER => {
                            rate_limited += 1;
                            tokio::time::sleep(wait).await;
                        }
                        _ => return Err(error),
                    }
                }
                other => break other?,
            }
        };
        let got = answer.response.name();
        A::Response::from_response(answer.response).ok_or_else(|| Error::Decode {
            status: answer.status,
            bytes: answer.bytes,
            source: DecodeError::UnexpectedResponse { expected: <A::Response as Response>::NAME, got },
        })
    }

    /// Every page of [`ListSessions`](crate::types::ListSessions) from the action's `cursor` on,
    /// following `nextCursor` until the server sends none; each page is one call (with the
    /// client's timeouts and retries).
    ///
    /// ```no_run
    /// use futures_util::TryStreamExt as _;
    /// use seed_agents_sdk::types::ListSessions;
    /// # async fn run(client: seed_agents_sdk::Client) -> Result<(), seed_agents_sdk::Error> {
    /// let mut pages = std::pin::pin!(client.list_sessions_pages(ListSessions::new().agent_id("agent-1").limit(50)));
    /// while let Some(page) = pages.try_next().await? {
    ///     for session in page.sessions {
    ///         println!("{} {:?}", session.id, session.title);
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn list_sessions_pages(
        &self,
        action: seed_agents_protocol::generated::ListSessions,
    ) -> impl futures_util::Stream<Item = Result<seed_agents_protocol::generated::ListSessionsResponse, Error>> + Send + '_
    {
        futures_util::stream::try_unfold(Some(action), move |next| async move {
            let Some(action) = next else { return Ok(None) };
            let page = self.call(action.clone()).await?;
            let next = page.next_cursor.clone().map(|cursor| {
                let mut action = action;
                action.cursor = Some(cursor);
                action
            });
            Ok(Some((page, next)))
        })
    }

    /// Signs `action` with the current time and returns the envelope bytes (what [`Client::send`]
    /// posts).
    pub async fn sign(&self, action: &AgentAction) -> Result<Vec<u8>, Error> {
        let map = match wire::to_ipld(action).map_err(|e| Error::Sign(e.into()))? {
            Ipld::Map(map) => map,
            _ => unreachable_action(),
        };
        Ok(self.sign_map(map).await?.0)
    }

    /// Signs an action given as its map (`_` included), adding `ts`; gives the map back (with
    /// `ts`), so a large field can be taken out again instead of copied before signing.
    pub(crate) async fn sign_map(
        &self,
        mut map: BTreeMap<String, Ipld>,
    ) -> Result<(Vec<u8>, BTreeMap<String, Ipld>), Error> {
        let now = (self.clock)();
        let previous = self
            .last_ts
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| Some(now.max(last.saturating_add(1))))
            .unwrap_or(now);
        let ts = now.max(previous.saturating_add(1));
        map.insert("ts".to_owned(), Ipld::Integer(ts.into()));
        let envelope = UnsignedEnvelope {
            signer: self.signer.principal(),
            account: self.account,
            protocol: self.protocol,
            action: Ipld::Map(map),
        };
        let body = envelope.sign(self.signer.as_ref()).await?;
        match envelope.action {
            Ipld::Map(map) => Ok((body, map)),
            _ => unreachable_action(),
        }
    }

    /// Signs and posts one action and returns whatever response the server sent.
    pub async fn send(&self, action: &AgentAction) -> Result<AgentResponse, Error> {
        let body = self.sign(action).await?;
        self.post(body).await
    }

    /// The server's WebSocket endpoint (`ws(s)://…/agents/ws`), from the server URL.
    pub fn socket_url(&self) -> Result<String, Error> {
        socket_endpoint(&self.endpoint)
    }

    /// Posts already signed envelope bytes and decodes the answer (with the write timeout; no
    /// retry).
    pub async fn post(&self, body: Vec<u8>) -> Result<AgentResponse, Error> {
        Ok(self.exchange(body, self.write_timeout).await?.response)
    }

    /// Posts envelope bytes; a success answer keeps its status and raw bytes for error reports.
    async fn exchange(&self, body: Vec<u8>, timeout: Option<Duration>) -> Result<Answer, Error> {
        let mut request = self
            .http
            .post(&self.endpoint)
            .header("content-type", "application/cbor")
            .header("accept", "application/cbor")
            .body(body);
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        let response = request.send().await.map_err(Error::Transport)?;
        let status = response.status().as_u16();
        let server_protocol = response
            .headers()
            .get(AGENTS_PROTOCOL_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<u32>().ok());
        if let Some(protocol) = server_protocol {
            self.server_protocol.store(protocol, Ordering::Relaxed);
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response.bytes().await.map_err(Error::Transport)?;
        let decoded = match wire::from_slice::<AgentResponse>(&bytes) {
            Ok(decoded) => decoded,
            Err(err) => return Err(Error::Decode { status, bytes, source: DecodeError::Wire(err) }),
        };
        match decoded {
            AgentResponse::Error(error) if status == 426 || error.code.as_deref() == Some(PROTOCOL_TOO_OLD) => {
                Err(Error::ProtocolTooOld {
                    client_protocol: self.protocol.unwrap_or(1),
                    server_protocol,
                    message: error.message,
                })
            }
            AgentResponse::Error(error) => Err(api_error(status, error, retry_after)),
            other if !(200..300).contains(&status) => Err(Error::Decode {
                status,
                bytes,
                source: DecodeError::SuccessWithErrorStatus { status, got: other.name() },
            }),
            response => Ok(Answer { status, bytes, response }),
        }
    }
}

/// A decoded success answer with what came over the wire.
struct Answer {
    status: u16,
    bytes: bytes::Bytes,
    response: AgentResponse,
}

fn api_error(status: u16, error: ErrorResponse, retry_after: Option<Duration>) -> Error {
    Error::Api {
        status,
        message: error.message,
        code: error.code.map(ErrorCode::from),
        received: error.received.and_then(|received| u64::try_from(received).ok()),
        retry_after,
    }
}

/// Every `AgentAction` serialises as a map (it is tagged by `_`); nothing else can come out.
fn unreachable_action() -> ! {
    panic!("an AgentAction always serialises to a map")
}

fn message_endpoint(server_url: &str) -> Result<String, Error> {
    let invalid = |reason: &str| Error::InvalidUrl { url: server_url.to_owned(), reason: reason.to_owned() };
    let url = reqwest::Url::parse(server_url).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("the URL must not have a query or fragment"));
    }
    let base = url.as_str().trim_end_matches('/');
    Ok(format!("{base}/api/message"))
}

/// The WebSocket endpoint beside a message endpoint (`…/api/message`): the same host with
/// `ws`/`wss`, and the path `/agents/ws` (a base that already ends in `/agents` keeps one).
fn socket_endpoint(message_endpoint: &str) -> Result<String, Error> {
    let base = message_endpoint.strip_suffix("/api/message").unwrap_or(message_endpoint);
    let base = base.strip_suffix("/agents").unwrap_or(base);
    let (scheme, rest) = base
        .split_once("://")
        .ok_or_else(|| Error::InvalidUrl { url: message_endpoint.to_owned(), reason: "no scheme".to_owned() })?;
    let scheme = if scheme == "https" { "wss" } else { "ws" };
    Ok(format!("{scheme}://{rest}/agents/ws"))
}

/// A `reqwest` client set up the way the SDK's own is (rustls with the ring provider when the
/// `tls` feature is on). Use it for requests beside the SDK's, e.g. health checks.
///
/// It connects with [`DEFAULT_CONNECT_TIMEOUT`]; request timeouts are per request.
pub fn default_http_client() -> Result<reqwest::Client, Error> {
    http_client(DEFAULT_CONNECT_TIMEOUT)
}

fn http_client(connect_timeout: Duration) -> Result<reqwest::Client, Error> {
    #[cfg(feature = "tls")]
    {
        // reqwest is built without a bundled crypto provider; ring is ours. Installing twice is
        // harmless (the first provider stays).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    reqwest::Client::builder().connect_timeout(connect_timeout).build().map_err(Error::Transport)
}

/// A fresh idempotency key: 128 random bits in hex.
fn idempotency_key() -> String {
    let mut bytes = [0u8; 16];
    // Without an OS random source, the clock and a counter still make keys of this process
    // differ from each other.
    if getrandom::fill(&mut bytes).is_err() {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let count = u128::from(COUNTER.fetch_add(1, Ordering::Relaxed));
        bytes = (now ^ (count << 96)).to_le_bytes();
    }
    format!("sdk-{}", hex::encode(bytes))
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{message_endpoint, socket_endpoint};

    #[test]
    fn endpoint_appends_api_message_to_any_base() {
        assert_eq!(message_endpoint("http://127.0.0.1:3050").unwrap(), "http://127.0.0.1:3050/api/message");
        assert_eq!(message_endpoint("https://h.example/agents/").unwrap(), "https://h.example/agents/api/message");
        assert!(message_endpoint("ftp://h.example").is_err());
        assert!(message_endpoint("not a url").is_err());
    }

    #[test]
    fn the_socket_lives_at_agents_ws_beside_the_message_endpoint() {
        let socket = |base: &str| socket_endpoint(&message_endpoint(base).unwrap()).unwrap();
        assert_eq!(socket("http://127.0.0.1:3050"), "ws://127.0.0.1:3050/agents/ws");
        assert_eq!(socket("https://h.example/agents/"), "wss://h.example/agents/ws");
        assert_eq!(socket("https://h.example/base"), "wss://h.example/base/agents/ws");
    }
}
