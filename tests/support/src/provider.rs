//! A scripted model provider on loopback, speaking OpenAI chat completions
//! (`/v1/chat/completions` and `/chat/completions`), Anthropic Messages (`/v1/messages`) and
//! OpenAI's Responses API (`/v1/responses`, `/responses` and the subscription backend's
//! `/backend-api/codex/responses`, formatted in [`responses`]) and
//! Gemini (`/v1beta/models/<model>:streamGenerateContent`, in [`gemini`]).
//!
//! Each request is answered by the next [`Script`] in a queue, formatted as the vendor streams
//! it (docs/runtime.md §2.2, §2.4 and §2.5): chat completions start with a role chunk whose
//! `content` is null, carry `usage: null` until a final usage chunk with `choices: []`, and end
//! with `data: [DONE]`; Messages send `event:`/`data:` pairs from `message_start` (with a `ping`)
//! to `message_stop`; Gemini sends `GenerateContentResponse` chunks until one with a finish
//! reason. Scripts can split text into 1-character deltas and tool arguments into
//! mid-token fragments, delay chunks, drop the connection or hang part-way, hold part-way until
//! the test opens a [`Gate`], or answer an error status. When the queue is empty a [`Fallback`] answers (echo, for benchmarks), or a 500 that
//! names the missing script. Every request is recorded (path, headers, JSON body) so tests can
//! assert on the conversation sent.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::post;
use futures_util::stream::{self, BoxStream, StreamExt as _};
use serde_json::{Value, json};

pub mod gemini;
pub mod responses;

/// A running scripted provider; stops when dropped.
pub struct Provider {
    addr: SocketAddr,
    state: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    scripts: Mutex<VecDeque<Script>>,
    fallback: Mutex<Option<Fallback>>,
    requests: Mutex<Vec<Recorded>>,
}

/// A request the provider received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The request path, such as `/v1/messages`.
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The JSON body (`Value::Null` when it was not JSON).
    pub body: Value,
    /// When the request arrived.
    pub received: std::time::Instant,
    /// When the first byte of a streamed answer went out (see [`Recorded::first_byte`]).
    first_byte: Arc<Mutex<Option<std::time::Instant>>>,
}

impl Recorded {
    /// When the first byte of a streamed answer went out (`None` for errors, or not yet).
    pub fn first_byte(&self) -> Option<std::time::Instant> {
        *self.first_byte.lock().expect("first byte")
    }

    /// A header's value as text (empty when absent).
    pub fn header(&self, name: &str) -> String {
        self.headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned()
    }
}

/// What answers when the script queue is empty.
#[derive(Clone, Debug)]
pub enum Fallback {
    /// The text of the last user message, as one streamed answer.
    Echo,
    /// Always this text.
    Text(String),
    /// Always this text, one character per delta.
    Pieces(String),
    /// Whatever the function answers for the request's JSON body (tests whose requests arrive in
    /// no fixed order: concurrent children, crash recovery).
    Rule(fn(&Value) -> Script),
}

/// Which vendor format a request came in (and its answer goes out) in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Vendor {
    OpenAi,
    Anthropic,
    Google,
    Responses,
}

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Script {
    answer: Answer,
    split: bool,
    delay: Duration,
    /// Send this many SSE events, then abort the connection.
    drop_after: Option<usize>,
    /// Send this many SSE events, then send nothing more without closing.
    hang_after: Option<usize>,
    /// Send this many SSE events, then wait for the gate to open before the rest.
    hold: Option<(usize, Gate)>,
}

/// Where a held answer waits (see [`Script::hold_after`]): the test opens it once it did what
/// must happen while the answer is still streaming, instead of slowing the answer down and
/// sleeping for part of it.
#[derive(Clone, Debug)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self(Arc::new(tokio::sync::watch::channel(false).0))
    }

    /// Lets every answer held at this gate go on (and any held later pass at once).
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    pub(crate) async fn opened(&self) {
        let _ = self.0.subscribe().wait_for(|open| *open).await;
    }
}

#[derive(Clone, Debug)]
enum Answer {
    Reply(Reply),
    Status { status: u16, message: String, retry_after: Option<u64>, raw_body: Option<String> },
}

#[derive(Clone, Debug, Default)]
struct Reply {
    reasoning: Option<String>,
    text: Option<String>,
    calls: Vec<(String, String, String)>,
    finish: Option<String>,
    usage: (u64, u64, u64, u64),
}

impl Script {
    fn reply(reply: Reply) -> Self {
        let answer = Answer::Reply(reply);
        Self { answer, split: false, delay: Duration::ZERO, drop_after: None, hang_after: None, hold: None }
    }

    /// A text answer.
    pub fn text(text: &str) -> Self {
        Self::reply(Reply { text: Some(text.to_owned()), usage: (10, 5, 0, 0), ..Reply::default() })
    }

    /// A tool call; `arguments` is the raw JSON text the model "writes" (it may be invalid).
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Self {
        Self::reply(Reply { usage: (10, 5, 0, 0), ..Reply::default() }).and_tool_call(id, name, arguments)
    }

    /// An answer whose stream stops after its first event without closing.
    pub fn hang() -> Self {
        Self::text("never sent").hang_after(1)
    }

    /// An error status with a vendor-shaped JSON body carrying `scripted <status>`.
    pub fn status(status: u16) -> Self {
        let answer =
            Answer::Status { status, message: format!("scripted {status}"), retry_after: None, raw_body: None };
        Self { answer, split: false, delay: Duration::ZERO, drop_after: None, hang_after: None, hold: None }
    }

    /// Another tool call after the ones already scripted.
    pub fn and_tool_call(mut self, id: &str, name: &str, arguments: &str) -> Self {
        if let Answer::Reply(reply) = &mut self.answer {
            reply.calls.push((id.to_owned(), name.to_owned(), arguments.to_owned()));
        }
        self
    }

    /// Answer text streamed before any tool call.
    pub fn with_text(mut self, text: &str) -> Self {
        if let Answer::Reply(reply) = &mut self.answer {
            reply.text = Some(text.to_owned());
        }
        self
    }

    /// Reasoning text streamed before the answer (`reasoning_content` / a `thinking` block).
    pub fn reasoning(mut self, text: &str) -> Self {
        if let Answer::Reply(reply) = &mut self.answer {
            reply.reasoning = Some(text.to_owned());
        }
        self
    }

    /// The stop reason: `stop`, `length` or `tool_use` in neutral terms (mapped per vendor), or
    /// any vendor string as is (`content_filter`, `refusal`). By default `tool_use` when the
    /// script calls tools, else `stop`.
    pub fn finish(mut self, reason: &str) -> Self {
        if let Answer::Reply(reply) = &mut self.answer {
            reply.finish = Some(reason.to_owned());
        }
        self
    }

    /// Usage to report: uncached input, output, cache reads, cache writes.
    pub fn usage(mut self, input: u64, output: u64, cache_read: u64, cache_write: u64) -> Self {
        if let Answer::Reply(reply) = &mut self.answer {
            reply.usage = (input, output, cache_read, cache_write);
        }
        self
    }

    /// Text in 1-character deltas, tool arguments in 3-byte fragments (cut mid-token).
    pub fn split(mut self) -> Self {
        self.split = true;
        self
    }

    /// A pause before each SSE event.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Send `events` SSE events, then abort the connection.
    pub fn drop_after(mut self, events: usize) -> Self {
        self.drop_after = Some(events);
        self
    }

    /// Send `events` SSE events, then nothing more, keeping the connection open.
    pub fn hang_after(mut self, events: usize) -> Self {
        self.hang_after = Some(events);
        self
    }

    /// Send `events` SSE events, then wait until `gate` opens before sending the rest.
    pub fn hold_after(mut self, events: usize, gate: &Gate) -> Self {
        self.hold = Some((events, gate.clone()));
        self
    }

    /// The error message of a status script.
    pub fn message(mut self, text: &str) -> Self {
        if let Answer::Status { message, .. } = &mut self.answer {
            *message = text.to_owned();
        }
        self
    }

    /// The exact body of a status script (instead of the vendor-shaped JSON).
    pub fn raw_body(mut self, body: &str) -> Self {
        if let Answer::Status { raw_body, .. } = &mut self.answer {
            *raw_body = Some(body.to_owned());
        }
        self
    }

    /// A `retry-after` header (seconds) on a status script.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        if let Answer::Status { retry_after, .. } = &mut self.answer {
            *retry_after = Some(seconds);
        }
        self
    }
}

impl Provider {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/chat/completions", post(chat_completions))
            .route("/v1/messages", post(messages))
            .route("/v1beta/{*resource}", post(gemini::generate))
            .route("/v1/responses", post(responses_api))
            .route("/responses", post(responses_api))
            .route("/backend-api/codex/responses", post(responses_api))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state, task }
    }

    /// The base URL for chat completions endpoints (`…/v1`).
    pub fn openai_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base URL for Anthropic endpoints (no `/v1`).
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL for Gemini endpoints (`…/v1beta`, as `--provider-url google=` takes it).
    pub fn google_base(&self) -> String {
        format!("http://{}/v1beta", self.addr)
    }

    /// The base URL of the subscription backend (`…/backend-api/codex`, as
    /// `--provider-url openai-subscription=` takes it).
    pub fn codex_base(&self) -> String {
        format!("http://{}/backend-api/codex", self.addr)
    }

    /// Queues a script for the next request.
    pub fn push(&self, script: Script) {
        self.state.scripts.lock().expect("scripts").push_back(script);
    }

    /// Sets what answers when the queue is empty.
    pub fn set_fallback(&self, fallback: Fallback) {
        *self.state.fallback.lock().expect("fallback") = Some(fallback);
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().expect("requests").clone()
    }

    /// Every request received so far, removed from the record (long benchmarks drain it).
    pub fn take_requests(&self) -> Vec<Recorded> {
        std::mem::take(&mut *self.state.requests.lock().expect("requests"))
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        self.state.requests.lock().expect("requests").len()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat_completions(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    answer(&state, Vendor::OpenAi, uri, headers, &body)
}

async fn messages(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    answer(&state, Vendor::Anthropic, uri, headers, &body)
}

async fn responses_api(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    answer(&state, Vendor::Responses, uri, headers, &body)
}

fn answer(state: &Shared, vendor: Vendor, uri: Uri, headers: HeaderMap, body: &[u8]) -> Response {
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let model = match vendor {
        Vendor::Google => gemini::model_of(&uri),
        _ => body.get("model").and_then(Value::as_str).unwrap_or("scripted").to_owned(),
    };
    let refusal = if vendor == Vendor::Google { gemini::refusal(&uri, &model, &body) } else { None };
    let echo = last_user_text(vendor, &body);
    let ruled = match &*state.fallback.lock().expect("fallback") {
        Some(Fallback::Rule(rule)) => Some(rule(&body)),
        _ => None,
    };
    let first_byte = Arc::new(Mutex::new(None));
    // Responses hand reasoning back encrypted only to a request that asked for it.
    let encrypted = vendor == Vendor::Responses && responses::wants_encrypted_reasoning(&body);
    state.requests.lock().expect("requests").push(Recorded {
        path: uri.path().to_owned(),
        headers,
        body,
        received: std::time::Instant::now(),
        first_byte: first_byte.clone(),
    });
    if let Some(refusal) = refusal {
        return error_response(vendor, 400, &refusal, None, None);
    }
    let script = state.scripts.lock().expect("scripts").pop_front().or_else(|| {
        state.fallback.lock().expect("fallback").clone().map(|fallback| match fallback {
            Fallback::Echo => Script::text(&echo),
            Fallback::Text(text) => Script::text(&text),
            Fallback::Pieces(text) => Script::text(&text).split(),
            Fallback::Rule(_) => ruled.clone().unwrap_or_else(|| Script::text("no rule")),
        })
    });
    let Some(script) = script else {
        return error_response(vendor, 500, "no script left for this request", None, None);
    };
    match script.answer {
        Answer::Status { status, message, retry_after, raw_body } => {
            error_response(vendor, status, &message, retry_after, raw_body)
        }
        Answer::Reply(ref reply) => {
            let events = match vendor {
                Vendor::OpenAi => openai_events(reply, &model, script.split),
                Vendor::Anthropic => anthropic_events(reply, &model, script.split),
                Vendor::Google => gemini::events(reply, &model, script.split),
                Vendor::Responses => responses::events(reply, &model, script.split, encrypted),
            };
            stream_response(events, &script, first_byte)
        }
    }
}

fn error_response(
    vendor: Vendor,
    status: u16,
    message: &str,
    retry_after: Option<u64>,
    raw_body: Option<String>,
) -> Response {
    let body = raw_body.unwrap_or_else(|| {
        let json = match vendor {
            Vendor::OpenAi | Vendor::Responses => {
                json!({"error": {"message": message, "type": "scripted_error", "param": null, "code": null}})
            }
            Vendor::Anthropic => json!({"type": "error", "error": {"type": "scripted_error", "message": message}}),
            Vendor::Google => return gemini::error_body(status, message),
        };
        json.to_string()
    });
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(seconds) = retry_after {
        response = response.header(header::RETRY_AFTER, seconds.to_string());
    }
    response.body(Body::from(body)).expect("error response")
}

fn stream_response(
    events: Vec<String>,
    script: &Script,
    first_byte: Arc<Mutex<Option<std::time::Instant>>>,
) -> Response {
    let delay = script.delay;
    let hold = script.hold.clone();
    let cut = script.drop_after.or(script.hang_after).unwrap_or(events.len());
    let head = stream::iter(events.into_iter().take(cut).enumerate()).then(move |(position, event)| {
        let first_byte = first_byte.clone();
        let gate = hold.as_ref().filter(|(at, _)| *at == position).map(|(_, gate)| gate.clone());
        async move {
            if let Some(gate) = gate {
                gate.opened().await;
            }
            // A scripted slow vendor: the pause is what the test is about.
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if position == 0 {
                *first_byte.lock().expect("first byte") = Some(std::time::Instant::now());
            }
            Ok::<Bytes, std::io::Error>(Bytes::from(event))
        }
    });
    let tail: BoxStream<'static, Result<Bytes, std::io::Error>> = if script.drop_after.is_some() {
        // A pause first, so what came before is flushed and the client sees a stream break off
        // (the body stream cannot tell when hyper has written what it yielded).
        stream::once(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "scripted drop"))
        })
        .boxed()
    } else if script.hang_after.is_some() {
        stream::pending().boxed()
    } else {
        stream::empty().boxed()
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(head.chain(tail)))
        .expect("stream response")
}

/// Text in 1-character pieces when split, else whole.
fn text_pieces(text: &str, split: bool) -> Vec<String> {
    if split { text.chars().map(String::from).collect() } else { vec![text.to_owned()] }
}

/// JSON text in 3-byte pieces (on character boundaries) when split, else whole.
fn argument_pieces(arguments: &str, split: bool) -> Vec<String> {
    if !split {
        return vec![arguments.to_owned()];
    }
    let mut pieces = Vec::new();
    let mut piece = String::new();
    for c in arguments.chars() {
        piece.push(c);
        if piece.len() >= 3 {
            pieces.push(std::mem::take(&mut piece));
        }
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

fn finish_reason(reply: &Reply, vendor: Vendor) -> String {
    let neutral =
        reply.finish.clone().unwrap_or_else(|| if reply.calls.is_empty() { "stop" } else { "tool_use" }.into());
    let mapped = match (neutral.as_str(), vendor) {
        ("stop", Vendor::OpenAi) => "stop",
        ("stop", Vendor::Anthropic) => "end_turn",
        ("length", Vendor::OpenAi) => "length",
        ("length", Vendor::Anthropic) => "max_tokens",
        ("tool_use", Vendor::OpenAi) => "tool_calls",
        ("tool_use", Vendor::Anthropic) => "tool_use",
        ("stop" | "tool_use", Vendor::Google) => "STOP",
        ("length", Vendor::Google) => "MAX_TOKENS",
        (other, _) => other,
    };
    mapped.to_owned()
}

fn openai_events(reply: &Reply, model: &str, split: bool) -> Vec<String> {
    let chunk = |choices: Value, usage: Value| {
        let body = json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": choices, "usage": usage});
        format!("data: {body}\n\n")
    };
    let delta = |delta: Value| chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}]), Value::Null);
    let mut events = vec![delta(json!({"role": "assistant", "content": null}))];
    for piece in reply.reasoning.iter().flat_map(|text| text_pieces(text, split)) {
        events.push(delta(json!({"reasoning_content": piece})));
    }
    for piece in reply.text.iter().flat_map(|text| text_pieces(text, split)) {
        events.push(delta(json!({"content": piece})));
    }
    for (index, (id, name, arguments)) in reply.calls.iter().enumerate() {
        events.push(delta(json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]})));
        for piece in argument_pieces(arguments, split) {
            events.push(delta(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})));
        }
    }
    let finish = finish_reason(reply, Vendor::OpenAi);
    events.push(chunk(json!([{"index": 0, "delta": {}, "finish_reason": finish}]), Value::Null));
    let (input, output, cache_read, cache_write) = reply.usage;
    let prompt = input + cache_read + cache_write;
    let usage = json!({"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cache_read + cache_write, "cache_write_tokens": cache_write}});
    events.push(chunk(json!([]), usage));
    events.push("data: [DONE]\n\n".to_owned());
    events
}

fn anthropic_events(reply: &Reply, model: &str, split: bool) -> Vec<String> {
    let event = |data: Value| {
        let name = data["type"].as_str().unwrap_or("unknown").to_owned();
        format!("event: {name}\ndata: {data}\n\n")
    };
    let (input, output, cache_read, cache_write) = reply.usage;
    let mut events = vec![
        event(json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1, "cache_read_input_tokens": cache_read,
                "cache_creation_input_tokens": cache_write}}})),
        event(json!({"type": "ping"})),
    ];
    let mut index = 0;
    if let Some(reasoning) = &reply.reasoning {
        events.push(event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "thinking", "thinking": ""}})));
        for piece in text_pieces(reasoning, split) {
            events.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "thinking_delta", "thinking": piece}})));
        }
        events.push(event(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "signature_delta", "signature": "c2NyaXB0ZWQ="}})));
        events.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    if let Some(text) = &reply.text {
        events.push(event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}})));
        for piece in text_pieces(text, split) {
            events.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece}})));
        }
        events.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for (id, name, arguments) in &reply.calls {
        events.push(event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        for piece in argument_pieces(arguments, split) {
            events.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}})));
        }
        events.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    let finish = finish_reason(reply, Vendor::Anthropic);
    events.push(event(json!({"type": "message_delta", "delta": {"stop_reason": finish, "stop_sequence": null},
        "usage": {"output_tokens": output}})));
    events.push(event(json!({"type": "message_stop"})));
    events
}

/// The text of the last user message in a vendor's body.
fn last_user_text(vendor: Vendor, body: &Value) -> String {
    if vendor == Vendor::Google {
        return gemini::last_user_text(body);
    }
    if vendor == Vendor::Responses {
        return responses::last_user_text(body);
    }
    let last_user = body["messages"].as_array().and_then(|messages| {
        messages.iter().rev().find(|message| {
            message["role"] == "user"
                && (vendor == Vendor::OpenAi
                    || message["content"].as_array().is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "text")))
        })
    });
    let Some(content) = last_user.map(|message| &message["content"]) else {
        return String::new();
    };
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|part| part["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    }
}
