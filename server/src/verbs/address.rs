//! The addresses the `read` and `write` verbs understand, parsed from a client's string.
//!
//! The forms are upstream's: `~/memory[/<path>]`, `~/self`, `attachment:<id>`, `thread:<id>`,
//! `run:<id>`, `~/tools[/<name>]`, `~/triggers[/<name>]`, `hm://…`, `http(s)://…`, `activity:`,
//! `ipfs://<cid>`. Forms upstream serves that this server does not yet (none today) parse as
//! [`Address::Unsupported`] so the error can say so instead of "unrecognized".

/// One parsed address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Address {
    /// `~/memory/<path>`: the raw relative path ("" for the root). A trailing `/` is kept: it
    /// asks for a listing.
    Memory(String),
    /// `~/self`: the agent's own definition summary.
    SelfSummary,
    /// `attachment:<id>`: one of the session's attachments.
    Attachment(String),
    /// `thread:<id>`: another session's transcript; `None` for the bare `thread:` listing.
    Thread(Option<String>),
    /// `run:<id>`.
    Run(String),
    /// `~/tools` (`None`) or `~/tools/<name>` (trailing slashes dropped).
    Tools(Option<String>),
    /// `~/triggers` (`None`) or `~/triggers/<name or id>` (trailing slashes dropped).
    Triggers(Option<String>),
    /// `hm://…`: a Hypermedia id, as given (trimmed).
    Hypermedia(String),
    /// `http://…` or `https://…`, as given (trimmed).
    Web(String),
    /// `activity:` (any suffix is ignored).
    Activity,
    /// `ipfs:…` as given (trimmed).
    Ipfs(String),
    /// A form upstream serves that this server does not implement yet (its label).
    Unsupported(&'static str),
    /// Anything else.
    Unrecognized,
}

/// Upstream's other address forms, by prefix, with the label used in the error.
const UNSUPPORTED: &[(&str, &str)] = &[];

impl Address {
    /// Parses `raw` (already trimmed of surrounding whitespace by the caller or not).
    pub(crate) fn parse(raw: &str) -> Address {
        let address = raw.trim();
        if address == "~/memory" {
            return Address::Memory(String::new());
        }
        if let Some(path) = address.strip_prefix("~/memory/") {
            return Address::Memory(path.to_owned());
        }
        if address == "~/self" || address == "~/self/" {
            return Address::SelfSummary;
        }
        if let Some(id) = address.strip_prefix("attachment:") {
            return Address::Attachment(id.trim().to_owned());
        }
        if let Some(id) = address.strip_prefix("thread:") {
            let id = id.trim();
            return Address::Thread((!id.is_empty()).then(|| id.to_owned()));
        }
        if let Some(id) = address.strip_prefix("run:") {
            return Address::Run(id.trim().to_owned());
        }
        if address == "~/tools" {
            return Address::Tools(None);
        }
        if let Some(name) = address.strip_prefix("~/tools/") {
            let name = name.trim_end_matches('/').trim();
            return Address::Tools((!name.is_empty()).then(|| name.to_owned()));
        }
        if address == "~/triggers" {
            return Address::Triggers(None);
        }
        if let Some(name) = address.strip_prefix("~/triggers/") {
            let name = name.trim_end_matches('/').trim();
            return Address::Triggers((!name.is_empty()).then(|| name.to_owned()));
        }
        if address.starts_with("hm://") {
            return Address::Hypermedia(address.to_owned());
        }
        if address.starts_with("https://") || address.starts_with("http://") {
            return Address::Web(address.to_owned());
        }
        if address.starts_with("activity:") {
            return Address::Activity;
        }
        if address.starts_with("ipfs:") {
            return Address::Ipfs(address.to_owned());
        }
        match UNSUPPORTED.iter().find(|(prefix, _)| address.starts_with(prefix)) {
            Some((_, label)) => Address::Unsupported(label),
            None => Address::Unrecognized,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_addresses_keep_their_relative_path() {
        assert_eq!(Address::parse("~/memory"), Address::Memory(String::new()));
        assert_eq!(Address::parse("~/memory/"), Address::Memory(String::new()));
        assert_eq!(Address::parse("  ~/memory/notes/a.md "), Address::Memory("notes/a.md".into()));
        assert_eq!(Address::parse("~/memory/notes/"), Address::Memory("notes/".into()));
        assert_eq!(Address::parse("~/memoryx"), Address::Unrecognized);
    }

    #[test]
    fn self_attachment_and_thread_addresses() {
        assert_eq!(Address::parse("~/self"), Address::SelfSummary);
        assert_eq!(Address::parse("~/self/"), Address::SelfSummary);
        assert_eq!(Address::parse("~/selfie"), Address::Unrecognized);
        assert_eq!(Address::parse("attachment:abc"), Address::Attachment("abc".into()));
        assert_eq!(Address::parse("attachment:"), Address::Attachment(String::new()));
        assert_eq!(Address::parse("thread:s-1"), Address::Thread(Some("s-1".into())));
        assert_eq!(Address::parse("thread: "), Address::Thread(None));
    }

    #[test]
    fn other_upstream_forms_are_unsupported_and_the_rest_unrecognized() {
        assert_eq!(Address::parse("~/tools/search"), Address::Tools(Some("search".into())));
        assert_eq!(Address::parse("~/tools/search//"), Address::Tools(Some("search".into())));
        assert_eq!(Address::parse("~/tools"), Address::Tools(None));
        assert_eq!(Address::parse("~/tools/"), Address::Tools(None));
        assert_eq!(Address::parse("~/toolsx"), Address::Unrecognized);
        assert_eq!(Address::parse("~/triggers/"), Address::Triggers(None));
        assert_eq!(Address::parse("~/triggers/Daily digest/"), Address::Triggers(Some("Daily digest".into())));
        assert_eq!(Address::parse(" hm://z6Mk/doc "), Address::Hypermedia("hm://z6Mk/doc".into()));
        assert_eq!(Address::parse("https://example.com/a"), Address::Web("https://example.com/a".into()));
        assert_eq!(Address::parse("http://example.com"), Address::Web("http://example.com".into()));
        assert_eq!(Address::parse("activity:anything"), Address::Activity);
        assert_eq!(Address::parse("ftp://example.com"), Address::Unrecognized);
        assert_eq!(Address::parse("ipfs://bafy"), Address::Ipfs("ipfs://bafy".into()));
        assert_eq!(Address::parse(" run: 1 "), Address::Run("1".into()));
        assert_eq!(Address::parse("/etc/passwd"), Address::Unrecognized);
        assert_eq!(Address::parse(""), Address::Unrecognized);
    }
}
