//! Block ids: 8 characters of `[A-Za-z0-9_-]`, as upstream's, but derived from the source
//! markdown instead of drawn at random (see the `prompt` module docs).

use sha2::{Digest, Sha256};

const ID_CHARS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/// Deterministic 8-character ids: SHA-256 of (source digest, sequence number).
pub(super) struct BlockIds {
    seed: [u8; 32],
    next: u64,
}

impl BlockIds {
    pub(super) fn new(source: &str) -> Self {
        Self { seed: Sha256::digest(source.as_bytes()).into(), next: 0 }
    }

    pub(super) fn generate(&mut self) -> String {
        let digest = Sha256::new()
            .chain_update(b"seed-prompt-block")
            .chain_update(self.seed)
            .chain_update(self.next.to_be_bytes())
            .finalize();
        self.next += 1;
        digest.iter().take(8).map(|byte| char::from(ID_CHARS[usize::from(byte & 63)])).collect()
    }
}
