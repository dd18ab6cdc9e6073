//! Tool-call ids as each vendor accepts them. Ids are stored as the provider that made them sent
//! them (OpenAI's Responses API makes long composite `call_id|item_id` ids, Gemini invents its
//! own), so a conversation replayed to another vendor must be rewritten on the way out. The
//! rewrite is a pure function of the id, so a call and its result always agree.
//!
//! Gemini is the other way round: it rarely names its calls, and calls and their responses pair
//! up by order and name, so no id is ever sent to it; [`google`] names each call it makes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// OpenAI chat completions: at most 40 characters; a composite `a|b` id keeps `a`, with anything
/// outside `[A-Za-z0-9_-]` replaced by `_`.
pub(crate) fn openai(id: &str) -> String {
    match id.split_once('|') {
        Some((call_id, _)) => sanitized(call_id, 40),
        None => id.chars().take(40).collect(),
    }
}

/// Anthropic: only `[a-zA-Z0-9_-]` (anything else becomes `_`), at most 64 characters.
pub(crate) fn anthropic(id: &str) -> String {
    sanitized(id, 64)
}

/// The id of a call Gemini made: the id it sent when it sent one not yet used in the step (`taken`),
/// else `<name>_<epoch ms>_<n>` as upstream names them, with at most 16 characters of the name and
/// `n` counting up across the process, so ids stay unique and under OpenAI's 40 characters.
pub(crate) fn google(sent: Option<&str>, name: &str, taken: &[String]) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    if let Some(id) = sent.filter(|id| !id.is_empty() && !taken.iter().any(|used| used == id)) {
        return id.to_owned();
    }
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
    let name: String = name.chars().take(16).collect();
    format!("{name}_{millis}_{n}")
}

/// OpenAI Responses: a composite `call_id|item_id` splits into its `call_id` and its function-call
/// item id; any other id is a `call_id` alone. Each part keeps `[A-Za-z0-9_-]` (anything else
/// becomes `_`), at most 64 characters, without trailing underscores (the ChatGPT backend refuses
/// them); an item id starts with `fc` (the vendor's prefix for function-call items).
pub(crate) fn responses(id: &str) -> (String, Option<String>) {
    let part = |text: &str| {
        let clean = sanitized(text, 64);
        let trimmed = clean.trim_end_matches('_');
        if trimmed.is_empty() { clean } else { trimmed.to_owned() }
    };
    match id.split_once('|') {
        Some((call_id, item_id)) => {
            let item_id = part(item_id);
            let item_id = if item_id.starts_with("fc") { item_id } else { part(&format!("fc_{item_id}")) };
            (part(call_id), Some(item_id))
        }
        None => (part(id), None),
    }
}

fn sanitized(id: &str, max_chars: usize) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(max_chars)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_ids() {
        assert_eq!(openai("call_abc"), "call_abc");
        let long = "c".repeat(50);
        assert_eq!(openai(&long), "c".repeat(40));
        assert_eq!(openai("call_9|fc_123456"), "call_9");
        assert_eq!(openai("call.9+x|fc_1"), "call_9_x");
        assert_eq!(openai(&format!("{}|item", "d".repeat(45))), "d".repeat(40));
    }

    #[test]
    fn responses_ids() {
        let split = |id: &str| responses(id);
        assert_eq!(split("call_9|fc_123"), ("call_9".into(), Some("fc_123".into())));
        assert_eq!(split("call_9"), ("call_9".into(), None));
        assert_eq!(split("toolu_01A-b"), ("toolu_01A-b".into(), None));
        assert_eq!(split("read_1700000000000_1"), ("read_1700000000000_1".into(), None));
        assert_eq!(split("call.9+x|item 7"), ("call_9_x".into(), Some("fc_item_7".into())));
        assert_eq!(split("call__|fc_1__"), ("call".into(), Some("fc_1".into())));
        let (call, item) = split(&format!("{}|fc_{}", "c".repeat(70), "i".repeat(70)));
        assert_eq!((call.len(), item.map(|item| item.len())), (64, Some(64)));
        // Only underscores: kept rather than sent empty.
        assert_eq!(split("é"), ("_".into(), None));
    }

    #[test]
    fn anthropic_ids() {
        assert_eq!(anthropic("toolu_01A-b"), "toolu_01A-b");
        assert_eq!(anthropic("call_9|fc_1"), "call_9_fc_1");
        assert_eq!(anthropic("read_1700000000000_1"), "read_1700000000000_1");
        assert_eq!(anthropic("é:x"), "__x");
        assert_eq!(anthropic(&"x".repeat(70)).len(), 64);
    }

    #[test]
    fn google_ids() {
        assert_eq!(google(Some("fc_1"), "read", &[]), "fc_1");
        let made = google(None, "read", &[]);
        let parts: Vec<&str> = made.split('_').collect();
        assert_eq!(parts.len(), 3, "{made}");
        assert_eq!(parts[0], "read");
        assert!(parts[1].parse::<u128>().is_ok() && parts[2].parse::<u64>().is_ok(), "{made}");
        // A repeated or empty id is replaced; every made-up id is new.
        let again = google(Some("fc_1"), "read", &["fc_1".to_owned()]);
        assert!(again.starts_with("read_"), "{again}");
        assert_ne!(google(Some(""), "read", &[]), google(None, "read", &[]));
        let long = google(None, &"n".repeat(64), &[]);
        assert!(long.len() <= 40 && long.starts_with(&"n".repeat(16)), "{long}");
        assert_eq!(openai(&long), long, "fits OpenAI's 40 characters");
    }
}
