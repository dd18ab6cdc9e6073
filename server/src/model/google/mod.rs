//! Google Gemini (docs/runtime.md §2.5): `request` writes the body of
//! `POST {base}/models/{model}:streamGenerateContent?alt=sse` (contents with roles `user` and
//! `model`, function declarations, `thinkingConfig`), `schema` turns each tool's JSON Schema into
//! the subset Gemini takes, and `stream` reads the streamed `GenerateContentResponse` chunks into a
//! step.
//!
//! Gemini rarely names its calls: calls and their responses pair up by order and name, so the
//! ids this server keeps (`ids::google`) never go out. What Gemini 2.5 and 3 need back instead
//! is each part's `thoughtSignature`, kept in the step's thinking within a pass.

mod request;
mod schema;
mod stream;

pub(crate) use request::body;
pub(crate) use stream::GenerateStream;

use crate::model::vendors::leading_version;

/// The signature Gemini accepts in place of a lost one, so a call replayed without its own (the
/// log never keeps signatures) passes Gemini 3's check that every call of the current turn is
/// signed.
pub(crate) const SKIP_SIGNATURE_CHECK: &str = "skip_thought_signature_validator";

/// The path under the base URL: `models/<model>:streamGenerateContent?alt=sse`. A model named
/// with its resource prefix (`models/…`, `tunedModels/…`, as Google lists them) keeps it; every
/// other character outside the unreserved set and `/` is percent-encoded.
pub(crate) fn stream_path(model: &str) -> String {
    let resource = if model.starts_with("models/") || model.starts_with("tunedModels/") {
        model.to_owned()
    } else {
        format!("models/{model}")
    };
    let mut path = String::with_capacity(resource.len() + 40);
    for byte in resource.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b'/') {
            path.push(char::from(byte));
        } else {
            path.push_str(&format!("%{byte:02X}"));
        }
    }
    path.push_str(":streamGenerateContent?alt=sse");
    path
}

/// The Gemini generation of a model id (`gemini-2.5-flash` → 2.5, `models/gemini-3-pro` → 3.0);
/// `None` for ids that do not name one.
pub(crate) fn generation(model: &str) -> Option<(u64, u64)> {
    let name = model.rsplit('/').next().unwrap_or(model);
    leading_version(name.strip_prefix("gemini-")?)
}

/// Whether a model is Gemini 3 or later: thinking levels instead of budgets, signed calls
/// required, images inside function responses.
pub(crate) fn third_generation(model: &str) -> bool {
    generation(model).is_some_and(|(major, _)| major >= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_generations() {
        assert_eq!(stream_path("gemini-2.5-flash"), "models/gemini-2.5-flash:streamGenerateContent?alt=sse");
        assert_eq!(stream_path("models/gemini-3-pro"), "models/gemini-3-pro:streamGenerateContent?alt=sse");
        assert_eq!(stream_path("tunedModels/t1"), "tunedModels/t1:streamGenerateContent?alt=sse");
        assert_eq!(stream_path("odd model?#"), "models/odd%20model%3F%23:streamGenerateContent?alt=sse");
        assert_eq!(generation("gemini-2.5-flash-lite"), Some((2, 5)));
        assert_eq!(generation("models/gemini-3-pro-preview"), Some((3, 0)));
        assert_eq!(generation("learnlm-2.0"), None);
        assert!(third_generation("gemini-3.1-flash") && !third_generation("gemini-2.5-pro"));
    }
}
