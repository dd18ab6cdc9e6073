//! Read-only queries of the Hypermedia server: `GET /api/<Key>?<query>` (docs/hypermedia.md §1.2).
//!
//! `Resource`, `ResourceMetadata` and `Account` take one fixed `id` parameter; every other key
//! is "generic": one parameter per defined field, strings as they are, numbers and booleans as
//! their text, arrays and objects as JSON text. Answers are the SuperJSON `json` payload, left
//! as JSON for the caller to read the fields it needs.

use serde_json::{Map, Value};

use super::{HmClient, HmError, REQUEST_TIMEOUT};

/// The query parameters of a generic key from a JSON object of its input (nulls dropped).
pub(crate) fn generic_params(input: &Map<String, Value>) -> Vec<(String, String)> {
    input
        .iter()
        .filter_map(|(key, value)| {
            let text = match value {
                Value::Null => return None,
                Value::String(text) => text.clone(),
                Value::Bool(_) | Value::Number(_) | Value::Array(_) | Value::Object(_) => value.to_string(),
            };
            Some((key.clone(), text))
        })
        .collect()
}

impl HmClient<'_> {
    /// `GET /api/Resource?id=<hm id>`: `{type: 'document'|'comment'|'redirect'|'not-found'|…, …}`.
    pub async fn resource(&self, id: &str) -> Result<Value, HmError> {
        self.read_query("Resource", &[("id".to_owned(), id.to_owned())]).await
    }

    /// `GET /api/ResourceMetadata?id=<hm id>`.
    pub async fn resource_metadata(&self, id: &str) -> Result<Value, HmError> {
        self.read_query("ResourceMetadata", &[("id".to_owned(), id.to_owned())]).await
    }

    /// `GET /api/Account?id=<uid>`: `{type: 'account', id, metadata}` or `{type: 'account-not-found'}`.
    pub async fn account(&self, uid: &str) -> Result<Value, HmError> {
        self.read_query("Account", &[("id".to_owned(), uid.to_owned())]).await
    }

    /// `GET /api/ListEvents?…` (generic): `{events, nextPageToken}`.
    pub async fn list_events(&self, input: &Map<String, Value>) -> Result<Value, HmError> {
        self.read_query("ListEvents", &generic_params(input)).await
    }

    /// `GET /api/Query?…` (generic): `{in, results, mode?}` or null.
    pub async fn directory_query(&self, input: &Map<String, Value>) -> Result<Value, HmError> {
        self.read_query("Query", &generic_params(input)).await
    }

    /// `GET /api/ListChanges?targetId=<hm id>`: `{changes: [{id, author, deps, createTime}], latestVersion?}`.
    pub async fn list_changes(&self, target_id: &str) -> Result<Value, HmError> {
        self.read_query("ListChanges", &[("targetId".to_owned(), target_id.to_owned())]).await
    }

    /// `GET /api/Comment?__value=<authority>/<tsid>`: the comment (docs/hypermedia.md §1.6).
    pub async fn comment(&self, record_id: &str) -> Result<Value, HmError> {
        self.read_query("Comment", &[("__value".to_owned(), record_id.to_owned())]).await
    }

    /// `GET /api/ListCapabilities?targetId=<hm id>`: `{capabilities: [{id, issuer, delegate, role, …}]}`.
    pub async fn list_capabilities(&self, target_id: &str) -> Result<Value, HmError> {
        self.read_query("ListCapabilities", &[("targetId".to_owned(), target_id.to_owned())]).await
    }

    /// A read-only key with its query parameters; the SuperJSON `json` payload of the answer.
    pub async fn read_query(&self, key: &'static str, params: &[(String, String)]) -> Result<Value, HmError> {
        let mut url = reqwest::Url::parse(&format!("{}/api/{key}", self.base))
            .map_err(|error| HmError::Encode(format!("invalid Hypermedia server URL: {error}")))?;
        if !params.is_empty() {
            url.query_pairs_mut().extend_pairs(params.iter().map(|(key, value)| (key.as_str(), value.as_str())));
        }
        let response = self
            .http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|error| HmError::Transport(crate::error::chain(&error)))?;
        answer(key, response).await
    }
}

/// The SuperJSON `json` payload of a 2xx answer; a non-2xx answer as [`HmError::Status`] with
/// the server's `error` (or the start of the body).
pub(super) async fn answer(key: &'static str, response: reqwest::Response) -> Result<Value, HmError> {
    let status = response.status();
    let text = response.text().await.map_err(|error| HmError::Transport(crate::error::chain(&error)))?;
    if !status.is_success() {
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|value| value.get("error").and_then(|error| error.as_str().map(str::to_owned)))
            .unwrap_or_else(|| text.chars().take(512).collect());
        return Err(HmError::Status {
            key,
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("").to_owned(),
            message,
        });
    }
    let mut envelope: Value = serde_json::from_str(&text)
        .map_err(|error| HmError::Response { key, message: format!("not JSON: {error}") })?;
    envelope
        .get_mut("json")
        .map(Value::take)
        .ok_or_else(|| HmError::Response { key, message: "not a SuperJSON envelope".to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_params_encode_primitives_as_text_and_the_rest_as_json() {
        let input = serde_json::json!({
            "pageSize": 20, "trustedOnly": true, "currentAccount": "z6Mk", "filterAuthors": ["a", "b"], "gone": null
        });
        let Value::Object(input) = input else { unreachable!() };
        let mut params = generic_params(&input);
        params.sort();
        assert_eq!(
            params,
            [
                ("currentAccount".to_owned(), "z6Mk".to_owned()),
                ("filterAuthors".to_owned(), r#"["a","b"]"#.to_owned()),
                ("pageSize".to_owned(), "20".to_owned()),
                ("trustedOnly".to_owned(), "true".to_owned()),
            ]
        );
    }
}
