//! The activity feed (docs/hypermedia.md §4.1): `GET /api/ListEvents` pages, as the trigger
//! monitor and the agent's dry runs read them.
//!
//! One page is asked for with `{pageSize, pageToken?, currentAccount, order: 'observed'}` (no
//! filters): in observed order a blob that reached the server late still surfaces at the top. The
//! answer is `{events, nextPageToken}`, where `""` means there is no next page. Events are left
//! as JSON: the matchers read the fields they need, and the run sees the event as sent.

use std::time::Duration;

use serde_json::{Map, Value as Json};

use super::{HmClient, HmError};

/// How long one `ListEvents` request may take.
pub(crate) const LIST_EVENTS_TIMEOUT: Duration = Duration::from_secs(20);

/// One page request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedQuery<'a> {
    /// Events per page.
    pub page_size: u32,
    /// The previous page's `nextPageToken` (absent for the first page).
    pub page_token: Option<&'a str>,
    /// The account whose view of the feed is read (the trigger owner).
    pub current_account: &'a str,
}

/// One page of the feed, newest observed first.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedPage {
    /// The events (entries that are not JSON objects are dropped).
    pub events: Vec<Map<String, Json>>,
    /// The token of the next page; `None` at the end of the feed.
    pub next_page_token: Option<String>,
}

impl HmClient<'_> {
    /// `GET /api/ListEvents` for one page, within `timeout`.
    pub async fn feed_page(&self, query: &FeedQuery<'_>, timeout: Duration) -> Result<FeedPage, HmError> {
        let mut params = vec![
            ("pageSize".to_owned(), query.page_size.to_string()),
            ("currentAccount".to_owned(), query.current_account.to_owned()),
            ("order".to_owned(), "observed".to_owned()),
        ];
        if let Some(token) = query.page_token {
            params.push(("pageToken".to_owned(), token.to_owned()));
        }
        let answer = tokio::time::timeout(timeout, self.read_query("ListEvents", &params))
            .await
            .map_err(|_| HmError::Transport(format!("ListEvents did not answer within {} s", timeout.as_secs())))??;
        page(answer)
    }
}

/// Reads a `ListEvents` payload.
fn page(mut answer: Json) -> Result<FeedPage, HmError> {
    let bad = |message: &str| HmError::Response { key: "ListEvents", message: message.to_owned() };
    let Some(Json::Array(events)) = answer.get_mut("events").map(Json::take) else {
        return Err(bad("events is not a list"));
    };
    let next_page_token = match answer.get("nextPageToken") {
        None | Some(Json::Null) => None,
        Some(Json::String(token)) => Some(token.clone()).filter(|token| !token.is_empty()),
        Some(_) => return Err(bad("nextPageToken is not a string")),
    };
    let events = events
        .into_iter()
        .filter_map(|event| match event {
            Json::Object(event) => Some(event),
            _ => None,
        })
        .collect();
    Ok(FeedPage { events, next_page_token })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_page_keeps_object_events_and_ends_on_an_empty_token() {
        let read = page(json!({"events": [{"id": "a"}, 3, {"id": "b"}], "nextPageToken": ""})).unwrap();
        assert_eq!(read.events.len(), 2);
        assert_eq!(read.next_page_token, None);
        let read = page(json!({"events": [], "nextPageToken": "p50"})).unwrap();
        assert_eq!(read.next_page_token.as_deref(), Some("p50"));
        assert!(page(json!({"nextPageToken": ""})).is_err());
        assert!(page(json!({"events": [], "nextPageToken": 5})).is_err());
    }
}
