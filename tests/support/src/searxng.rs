//! A fake SearXNG on loopback: `GET /search` answers the next queued JSON body (or, when the
//! queue is empty, no results), and records each request's query parameters.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::routing::get;
use serde_json::{Value, json};

#[derive(Default)]
struct Shared {
    answers: Mutex<VecDeque<Value>>,
    requests: Mutex<Vec<BTreeMap<String, String>>>,
    /// When each request arrived, Unix epoch milliseconds (the servers' clock in these tests).
    arrivals: Mutex<Vec<i64>>,
}

pub struct FakeSearxng {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeSearxng {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind fake SearXNG");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let shared = Arc::new(Shared::default());
        let router = Router::new().route("/search", get(search)).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { url, shared, task }
    }

    /// Queues the JSON body of the next answer.
    pub fn push(&self, answer: Value) {
        self.shared.answers.lock().unwrap().push_back(answer);
    }

    /// The query parameters of every request so far, in order.
    pub fn requests(&self) -> Vec<BTreeMap<String, String>> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Each request's `q` with when it arrived (Unix epoch milliseconds), in order.
    pub fn queries_at(&self) -> Vec<(String, i64)> {
        let requests = self.shared.requests.lock().unwrap();
        let arrivals = self.shared.arrivals.lock().unwrap();
        requests
            .iter()
            .zip(arrivals.iter())
            .map(|(params, at)| (params.get("q").cloned().unwrap_or_default(), *at))
            .collect()
    }
}

impl Drop for FakeSearxng {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn search(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> axum::Json<Value> {
    let params: BTreeMap<String, String> = reqwest::Url::parse(&format!("http://x/?{}", query.unwrap_or_default()))
        .map(|url| url.query_pairs().map(|(key, value)| (key.into_owned(), value.into_owned())).collect())
        .unwrap_or_default();
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_millis() as i64);
    // Both under the requests' lock, so the two lists stay in step.
    let mut requests = shared.requests.lock().unwrap();
    requests.push(params);
    shared.arrivals.lock().unwrap().push(now);
    drop(requests);
    let answer = shared.answers.lock().unwrap().pop_front();
    axum::Json(answer.unwrap_or_else(|| json!({"results": [], "unresponsive_engines": []})))
}
