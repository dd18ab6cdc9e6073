//! The checks every action shares, with upstream's wording: trimmed bounded strings and encoded
//! size limits.

use crate::error::{ApiError, ApiResult};

/// The byte limit of names, ids, provider types, secret names and secret reference keys.
pub(crate) const MAX_NAME_BYTES: usize = 256;
/// The limit of the canonical CBOR encoding of open maps (`modelDefaults`, `metadata`).
pub(crate) const MAX_OPEN_MAP_CBOR_BYTES: usize = 16 * 1024;

/// Trims the characters JavaScript's `String.prototype.trim` removes.
///
/// Differs from [`str::trim`] in two code points: U+FEFF is trimmed here and U+0085 is not. Inputs
/// are compared and stored exactly as the upstream server would, so the difference matters.
pub(crate) fn js_trim(value: &str) -> &str {
    value.trim_matches(is_js_whitespace)
}

fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{D}'
            | ' '
            | '\u{A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
            | '\u{FEFF}'
    )
}

/// Whether `name` is a slug: 1 to 32 of `a-z`, `0-9`, `_` and `-`, starting with a letter or a
/// digit (MCP server names).
pub(crate) fn is_slug(name: &str) -> bool {
    let mut bytes = name.bytes();
    (1..=32).contains(&name.len())
        && bytes.next().is_some_and(|first| first.is_ascii_lowercase() || first.is_ascii_digit())
        && bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-')
}

/// The protocol's usual string check: trimmed, then 400 `<label> is required` when blank and
/// 400 `<label> is too large` when longer than `max_bytes` UTF-8 bytes. Returns the trimmed value.
pub(crate) fn bounded_string(value: &str, label: &str, max_bytes: usize) -> ApiResult<String> {
    let trimmed = js_trim(value);
    if trimmed.is_empty() {
        return Err(ApiError::invalid(format!("{label} is required")));
    }
    if trimmed.len() > max_bytes {
        return Err(ApiError::invalid(format!("{label} is too large")));
    }
    Ok(trimmed.to_owned())
}

/// The size of a value in canonical DAG-CBOR, for the protocol's encoded-size limits.
pub(crate) fn cbor_len<T: serde::Serialize + ?Sized>(value: &T) -> ApiResult<usize> {
    seed_agents_protocol::wire::to_vec(value).map(|bytes| bytes.len()).map_err(ApiError::internal)
}
