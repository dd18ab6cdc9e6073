//! Protocol version constants and the reading of a client's declared version.
//!
//! The rules for changing these numbers are in `schema/PROTOCOL.md`.

use ipld_core::ipld::Ipld;

/// The protocol version this build speaks, client and server alike.
pub const AGENTS_PROTOCOL_VERSION: u32 = 3;

/// The oldest client protocol a server built from this code still answers. Below it the server
/// answers HTTP 426 with `{_: 'Error', code: 'protocol_too_old'}`.
pub const MIN_CLIENT_PROTOCOL: u32 = 1;

/// The oldest server protocol a client built from this code still talks to.
pub const MIN_SERVER_PROTOCOL: u32 = 1;

/// Response header carrying the server's [`AGENTS_PROTOCOL_VERSION`].
pub const AGENTS_PROTOCOL_HEADER: &str = "X-Agents-Protocol";

/// The version implied by an envelope or a response that carries none.
pub const IMPLICIT_PROTOCOL_VERSION: u32 = 1;

/// The `code` of the error a server answers when the client protocol is below its minimum.
pub const PROTOCOL_TOO_OLD: &str = "protocol_too_old";

/// The protocol version a client declared in `envelope.protocol`.
///
/// Absent, or anything but a whole number of at least 1, is read as
/// [`IMPLICIT_PROTOCOL_VERSION`]: a client that sends nonsense is not a client this code was
/// built with, so it gets the oldest shape.
///
/// ```
/// use ipld_core::ipld::Ipld;
/// use seed_agents_protocol::version::declared_protocol_version;
/// assert_eq!(declared_protocol_version(None), 1);
/// assert_eq!(declared_protocol_version(Some(&Ipld::Integer(3))), 3);
/// assert_eq!(declared_protocol_version(Some(&Ipld::Integer(0))), 1);
/// assert_eq!(declared_protocol_version(Some(&Ipld::String("3".into()))), 1);
/// ```
pub fn declared_protocol_version(value: Option<&Ipld>) -> u32 {
    let declared = match value {
        Some(Ipld::Integer(n)) => Some(*n),
        Some(Ipld::Float(f)) if crate::value::is_js_integer(*f) => Some(*f as i128),
        _ => None,
    };
    match declared {
        Some(n) if n >= 1 => u32::try_from(n).unwrap_or(u32::MAX),
        _ => IMPLICIT_PROTOCOL_VERSION,
    }
}

/// Reads the `X-Agents-Protocol` header value a server sent; absent or unreadable means 1.
pub fn parse_protocol_header(value: Option<&str>) -> u32 {
    value.and_then(|text| text.trim().parse::<u32>().ok()).filter(|n| *n >= 1).unwrap_or(IMPLICIT_PROTOCOL_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_agree_with_the_schema() {
        assert_eq!(AGENTS_PROTOCOL_VERSION, crate::generated::SCHEMA_PROTOCOL_VERSION);
        assert_eq!(MIN_CLIENT_PROTOCOL, crate::generated::SCHEMA_MIN_CLIENT_PROTOCOL);
    }

    #[test]
    fn nonsense_declarations_read_as_one() {
        for value in [Ipld::Integer(-3), Ipld::Float(2.5), Ipld::Null, Ipld::Bool(true), Ipld::List(vec![])] {
            assert_eq!(declared_protocol_version(Some(&value)), IMPLICIT_PROTOCOL_VERSION, "{value:?}");
        }
        assert_eq!(declared_protocol_version(Some(&Ipld::Float(2.0))), 2);
        assert_eq!(declared_protocol_version(Some(&Ipld::Integer(1i128 << 40))), u32::MAX);
        assert_eq!(parse_protocol_header(Some(" 3 ")), 3);
        assert_eq!(parse_protocol_header(Some("x")), 1);
        assert_eq!(parse_protocol_header(None), 1);
    }
}
