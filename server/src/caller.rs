//! Who is acting: the verified account, the key that signed, and the protocol it speaks.
//!
//! The edge (`auth::verify`) is the only place that builds a [`Caller`]: from a signed envelope
//! whose signature, window and signer it checked. Features receive it as a plain value and never
//! learn which transport the action came on.

use seed_agents_protocol::Principal;

/// Who is acting: the verified account, the key that signed, and the protocol it speaks.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The account the action is performed for, in its string form (`z…`), as stored and
    /// returned.
    pub account_id: String,
    /// The key that signed (the account itself or a delegate).
    pub signer: Principal,
    /// [`Self::signer`] in string form.
    pub signer_id: String,
    /// The client's declared protocol version.
    pub protocol: u32,
}
