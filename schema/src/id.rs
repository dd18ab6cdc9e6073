//! What the typed ids share.
//!
//! The ids themselves ([`AgentId`](crate::AgentId), [`SessionId`](crate::SessionId), …) are
//! generated from the schema's `x-ids` table into `generated/ids.rs`: each is a transparent
//! newtype over the wire's string, so it changes no encoded byte and decoding accepts any string.
//! A type whose entry names a `format` also has a checked `parse` (and `FromStr`), which reports an
//! [`IdError`]; this module holds that error and the formats.

use crate::{AccountId, Principal, PrincipalError};

/// An id that is not in the format its type's `parse` requires.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind}: expected {expected}")]
pub struct IdError {
    /// The id type (`AccountId`).
    pub kind: &'static str,
    /// What it must be.
    pub expected: &'static str,
}

/// A format an id type's `parse` checks (the `format` of its `x-ids` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdFormat {
    /// `principal`: the canonical base58btc string of a principal (`z…`), as [`Principal`] parses
    /// it.
    Principal,
    /// `sha256-hex`: a SHA-256 digest as 64 lowercase hex digits.
    Sha256Hex,
}

impl IdFormat {
    /// What the format requires, as [`IdError::expected`] says it.
    pub fn expected(self) -> &'static str {
        match self {
            IdFormat::Principal => "a canonical base58btc principal string (z…)",
            IdFormat::Sha256Hex => "64 lowercase hex digits",
        }
    }

    /// `value` when it is in this format; otherwise an [`IdError`] naming `kind` (the id type).
    pub fn check(self, kind: &'static str, value: String) -> Result<String, IdError> {
        let fits = match self {
            IdFormat::Principal => value.parse::<Principal>().is_ok(),
            IdFormat::Sha256Hex => value.len() == 64 && value.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        };
        if fits { Ok(value) } else { Err(IdError { kind, expected: self.expected() }) }
    }
}

impl AccountId {
    /// The account's principal; fails when the string is not a canonical principal string.
    pub fn to_principal(&self) -> Result<Principal, PrincipalError> {
        self.as_str().parse()
    }
}

impl From<Principal> for AccountId {
    fn from(principal: Principal) -> Self {
        AccountId::new(principal.to_string())
    }
}

impl From<&Principal> for AccountId {
    fn from(principal: &Principal) -> Self {
        AccountId::new(principal.to_string())
    }
}

impl PartialEq<Principal> for AccountId {
    /// Whether the id is the canonical string of `principal`.
    fn eq(&self, principal: &Principal) -> bool {
        self.to_principal().is_ok_and(|own| own == *principal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentId, AttachmentId};

    const PRINCIPAL: &str = "z6MkjEhszFcezhdTNdoerRrPrFHsnJ7412AXcz31jZStySWD";

    #[test]
    fn an_id_is_its_string_on_the_wire_and_in_rust() {
        let id = AgentId::new("agent-1");
        assert_eq!(crate::wire::to_vec(&id).unwrap(), crate::wire::to_vec("agent-1").unwrap());
        assert_eq!(crate::wire::from_slice::<AgentId>(&crate::wire::to_vec("").unwrap()).unwrap(), "");
        assert_eq!(id, "agent-1");
        assert_eq!("agent-1", id);
        assert_eq!(id.to_string(), "agent-1");
        assert_eq!(String::from(id.clone()), "agent-1");
        assert_eq!("agent-1".parse::<AgentId>(), Ok(id.clone()));
        let ids: std::collections::HashSet<AgentId> = [id].into();
        assert!(ids.contains("agent-1"));
    }

    #[test]
    fn a_formatted_id_parses_checked_and_converts() {
        let account = AccountId::parse(PRINCIPAL).unwrap();
        let principal: Principal = PRINCIPAL.parse().unwrap();
        assert_eq!(account.to_principal(), Ok(principal));
        assert_eq!(AccountId::from(&principal), account);
        assert_eq!(account, principal);
        let refused = "zNotAPrincipal".parse::<AccountId>().unwrap_err();
        assert_eq!(refused.to_string(), "invalid AccountId: expected a canonical base58btc principal string (z…)");
        // `new`, `From` and decoding check nothing.
        assert!(AccountId::from("zNotAPrincipal").to_principal().is_err());

        let digest = "ab".repeat(32);
        assert_eq!(AttachmentId::parse(digest.clone()).map(String::from), Ok(digest.clone()));
        assert!(AttachmentId::parse(digest.to_uppercase()).is_err());
        assert!(AttachmentId::parse("ab").is_err());
    }
}
