//! The limit of a request body, decided from its first bytes, before it is authenticated.
//!
//! A body is nobody's until its signature verifies, which needs every byte of it; the server's
//! `http::body` reads it under a limit per action, a server-wide budget and a deadline. The limit
//! is this module's: the envelope is canonical DAG-CBOR, so its keys come sorted (`sig`, `type`,
//! `action`, …) and the action's name is its first key, within the first couple of hundred bytes.
//! [`limit_for`] gives ordinary actions [`ORDINARY_LIMIT`] and only the actions that carry a file
//! inline more ([`action_limit`]).

use std::time::Duration;

/// The largest chunk of a chunked upload (`AppendFileUploadChunk`), in bytes.
pub const MAX_CHUNK_BYTES: i64 = 8 * 1024 * 1024;

/// The largest session attachment (`UploadSessionAttachment`), in bytes.
pub const MAX_ATTACHMENT_BYTES: u64 = 100 * 1024 * 1024;

/// The largest body of an action that carries no file: 4 MiB. The largest legitimate ones fit
/// with room: the worst is a `CreateAgent`/`UpdateAgent` whose 64 KiB system prompt is sent as
/// one block per character (about 1.5 MiB with 16 KiB of metadata); a `MessageSession` with
/// 64 KiB of text, 64 context lines of 2 KiB and 16 attachments, or a 64 KiB `SetSecret`, are
/// far smaller (the `largest_ordinary_actions_fit` test measures them).
pub const ORDINARY_LIMIT: usize = 4 << 20;

/// Room for an envelope around a file: principals, signature, names, paths, ids.
pub const ENVELOPE_SLACK: usize = 64 * 1024;

/// How many leading bytes are enough to find the action's name.
pub const PREFIX_BYTES: usize = 512;

/// How bodies are bounded (from the server's configuration).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// The limit of the actions that carry a file inline (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// Time for the first body bytes and for each later frame (`--body-timeout`).
    pub body_timeout: Duration,
    /// The average rate a body must keep up past `body_timeout` (`--body-min-rate`), bytes/s.
    pub body_min_rate: u64,
}

/// The limit of the action named `name`: ordinary actions get [`ORDINARY_LIMIT`]; the ones that
/// carry a file get what that file may be, plus the envelope around it.
pub fn action_limit(name: &str, max_body_bytes: usize) -> usize {
    let file = |bytes: usize| bytes.saturating_add(ENVELOPE_SLACK).min(max_body_bytes);
    match name {
        "AppendFileUploadChunk" => file(MAX_CHUNK_BYTES as usize),
        "UploadSessionAttachment" => file(MAX_ATTACHMENT_BYTES as usize),
        // Memory files have no size limit of their own, and a user verb may write one; an icon
        // has none either. The operator's ceiling is theirs.
        "WriteAgentMemoryFile" | "InvokeSessionTool" | "UpdateSigningIdentity" => max_body_bytes,
        _ => ORDINARY_LIMIT.min(max_body_bytes),
    }
}

/// What the first bytes of a body say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prefix<'a> {
    /// The action's name.
    Action(&'a str),
    /// Not enough bytes yet, or an envelope laid out unusually: no name to go by.
    Unknown,
    /// Not the start of a CBOR map: whatever it is, it is not an envelope.
    NotEnvelope,
}

/// Finds the action's name in the first bytes of an envelope without decoding the rest.
///
/// Walks the top-level map: small values before `action` are skipped (a canonical envelope has
/// only `sig` and `type` there), and the action map's first key must be `_`. Anything else
/// (a long value, a truncated prefix, another key order) is [`Prefix::Unknown`], which gets the
/// ordinary limit; the full decoder judges the body later.
pub fn parse_prefix(bytes: &[u8]) -> Prefix<'_> {
    let mut reader = Reader { bytes, at: 0 };
    match reader.head() {
        Some((5, entries)) => {
            for _ in 0..entries {
                let Some(key) = reader.text() else { return Prefix::Unknown };
                if key == "action" {
                    return match (reader.head(), reader.text()) {
                        (Some((5, _)), Some("_")) => reader.text().map_or(Prefix::Unknown, Prefix::Action),
                        _ => Prefix::Unknown,
                    };
                }
                if !reader.skip_small() {
                    return Prefix::Unknown;
                }
            }
            Prefix::Unknown
        }
        Some(_) => Prefix::NotEnvelope,
        None if bytes.is_empty() => Prefix::Unknown,
        None => Prefix::NotEnvelope,
    }
}

/// The limit for a body that starts with `prefix` (see [`parse_prefix`]).
pub fn limit_for(prefix: &[u8], limits: &BodyLimits) -> usize {
    match parse_prefix(prefix) {
        Prefix::Action(name) => action_limit(name, limits.max_body_bytes),
        Prefix::Unknown | Prefix::NotEnvelope => ORDINARY_LIMIT.min(limits.max_body_bytes),
    }
}

/// A cursor over CBOR heads, enough for [`parse_prefix`].
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A definite-length head: `(major type, argument)`. `None` at the end of the bytes or on
    /// an indefinite length or a reserved value.
    fn head(&mut self) -> Option<(u8, u64)> {
        let initial = *self.bytes.get(self.at)?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        let width = match info {
            0..=23 => 0,
            24 => 1,
            25 => 2,
            26 => 4,
            27 => 8,
            _ => return None,
        };
        let argument = if width == 0 {
            u64::from(info)
        } else {
            let raw = self.bytes.get(self.at + 1..self.at + 1 + width)?;
            raw.iter().fold(0u64, |value, byte| (value << 8) | u64::from(*byte))
        };
        self.at += 1 + width;
        Some((major, argument))
    }

    /// A text string that lies wholly within the bytes.
    fn text(&mut self) -> Option<&'a str> {
        let (major, length) = self.head()?;
        if major != 3 {
            return None;
        }
        let raw = self.take(length)?;
        std::str::from_utf8(raw).ok()
    }

    fn take(&mut self, length: u64) -> Option<&'a [u8]> {
        let end = self.at.checked_add(usize::try_from(length).ok()?)?;
        let raw = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(raw)
    }

    /// Skips an integer, a simple value, or a byte or text string that lies within the bytes.
    fn skip_small(&mut self) -> bool {
        match self.head() {
            Some((0 | 1 | 7, _)) => true,
            Some((2 | 3, length)) => self.take(length).is_some(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope_prefix(action: &str) -> Vec<u8> {
        let mut bytes = vec![0xa5, 0x63];
        bytes.extend(b"sig");
        bytes.extend([0x58, 64]);
        bytes.extend([0u8; 64]);
        bytes.push(0x64);
        bytes.extend(b"type");
        bytes.push(0x6c);
        bytes.extend(b"AgentsAction");
        bytes.push(0x66);
        bytes.extend(b"action");
        bytes.extend([0xa3, 0x61, b'_']);
        bytes.push(0x60 + action.len() as u8);
        bytes.extend(action.as_bytes());
        bytes
    }

    #[test]
    fn the_action_name_is_found_in_the_first_bytes() {
        let prefix = envelope_prefix("AppendFileUploadChunk");
        assert_eq!(parse_prefix(&prefix), Prefix::Action("AppendFileUploadChunk"));
        assert_eq!(parse_prefix(&prefix[..prefix.len() - 3]), Prefix::Unknown, "truncated");
        assert_eq!(parse_prefix(&[0u8; 64]), Prefix::NotEnvelope);
        assert_eq!(parse_prefix(b""), Prefix::Unknown);
        assert_eq!(parse_prefix(&[0x1f]), Prefix::NotEnvelope, "reserved head");
        // A map whose first value is too long to skip within the prefix.
        assert_eq!(parse_prefix(&[0xa1, 0x61, b'x', 0x5a, 0xff, 0xff, 0xff, 0xff]), Prefix::Unknown);
    }

    #[test]
    fn limits_follow_the_action() {
        let limits =
            BodyLimits { max_body_bytes: 128 << 20, body_timeout: Duration::from_secs(10), body_min_rate: 16 * 1024 };
        assert_eq!(limit_for(&envelope_prefix("ListAgents"), &limits), ORDINARY_LIMIT);
        assert_eq!(limit_for(&envelope_prefix("AppendFileUploadChunk"), &limits), (8 << 20) + ENVELOPE_SLACK);
        assert_eq!(limit_for(&envelope_prefix("UploadSessionAttachment"), &limits), (100 << 20) + ENVELOPE_SLACK);
        assert_eq!(limit_for(&envelope_prefix("WriteAgentMemoryFile"), &limits), 128 << 20);
        assert_eq!(limit_for(&[0u8; 600], &limits), ORDINARY_LIMIT, "not an envelope: the ordinary limit");
        let small = BodyLimits { max_body_bytes: 4096, ..limits };
        assert_eq!(limit_for(&envelope_prefix("AppendFileUploadChunk"), &small), 4096, "the flag is the ceiling");
    }
}
