//! Tool-call ids as each vendor accepts them. Ids are stored as the provider that made them sent
//! them (OpenAI's Responses API makes long composite `call_id|item_id` ids, Gemini invents its
//! own), so a conversation replayed to another vendor must be rewritten on the way out. The
//! rewrite is a pure function of the id, so a call and its result always agree.

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
    fn anthropic_ids() {
        assert_eq!(anthropic("toolu_01A-b"), "toolu_01A-b");
        assert_eq!(anthropic("call_9|fc_1"), "call_9_fc_1");
        assert_eq!(anthropic("read_1700000000000_1"), "read_1700000000000_1");
        assert_eq!(anthropic("é:x"), "__x");
        assert_eq!(anthropic(&"x".repeat(70)).len(), 64);
    }
}
