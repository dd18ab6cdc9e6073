//! `GET /api/Search` (docs/hypermedia.md §1.3): the Hypermedia server's search, behind the
//! `search` callable. A "generic" key: one query parameter per defined input field, strings as
//! they are, numbers and booleans as their text.

use serde_json::Value as Json;

use super::{HmClient, HmError};

/// The input of one search, as the callable resolved it (defaults applied, bounds clamped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchInput {
    /// The query text (non-empty).
    pub query: String,
    /// Only this account's content, when set.
    pub account_uid: Option<String>,
    /// Whether document bodies and comments are searched too.
    pub include_body: bool,
    /// Runes of match context, 0–512.
    pub context_size: u32,
    /// The account whose perspective ranks results (the agent's owner).
    pub perspective_account_uid: String,
    /// 0 keyword, 1 semantic, 2 hybrid.
    pub search_type: u8,
    /// Results wanted, 1–50.
    pub page_size: u32,
}

impl SearchInput {
    /// The query parameters, in a fixed order.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        let mut params = vec![("query", self.query.clone())];
        if let Some(account) = &self.account_uid {
            params.push(("accountUid", account.clone()));
        }
        params.extend([
            ("includeBody", self.include_body.to_string()),
            ("contextSize", self.context_size.to_string()),
            ("perspectiveAccountUid", self.perspective_account_uid.clone()),
            ("searchType", self.search_type.to_string()),
            ("pageSize", self.page_size.to_string()),
        ]);
        params
    }
}

impl HmClient<'_> {
    /// `GET /api/Search?…`: the SuperJSON payload (`{entities, searchQuery, nextPageToken}`).
    pub async fn search(&self, input: &SearchInput) -> Result<Json, HmError> {
        let params: Vec<(String, String)> =
            input.params().into_iter().map(|(name, value)| (name.to_owned(), value)).collect();
        self.read_query("Search", &params).await
    }
}
