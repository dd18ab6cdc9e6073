//! Looking for a secret in bytes, in every form it could be printed in: raw, lower and upper hex,
//! base64 (standard and URL-safe), base58btc, base32 and Rust's `{:?}` of a byte list. Any window
//! of 16 bytes of a form counts (32 or 40 for the low-entropy `{:?}` forms), so a truncated
//! print is found too.

use std::collections::{BTreeMap, HashMap};

/// Every window of every form of every secret, by window length.
#[derive(Clone, Default)]
pub struct Needles {
    windows: BTreeMap<usize, HashMap<Vec<u8>, (String, &'static str)>>,
}

impl Needles {
    /// Adds a secret in each of its forms.
    pub fn add(&mut self, secret: &str, bytes: &[u8]) {
        let forms: [(&'static str, Vec<u8>, usize); 9] = [
            ("raw", bytes.to_vec(), 16),
            ("hex", hex::encode(bytes).into_bytes(), 16),
            ("HEX", hex::encode_upper(bytes).into_bytes(), 16),
            ("base64", base64(bytes, b'+', b'/').into_bytes(), 16),
            ("base64url", base64(bytes, b'-', b'_').into_bytes(), 16),
            ("base58btc", base58(bytes).into_bytes(), 16),
            ("base32", base32(bytes).into_bytes(), 16),
            ("{:?} list", format!("{bytes:?}").into_bytes(), 40),
            ("{:?} list without spaces", format!("{bytes:?}").replace(' ', "").into_bytes(), 32),
        ];
        for (form, encoded, window) in forms {
            let window = window.min(encoded.len());
            let entries = self.windows.entry(window).or_default();
            for piece in encoded.windows(window) {
                entries.insert(piece.to_vec(), (secret.to_owned(), form));
            }
        }
    }

    /// Drops every form of `secret`.
    pub fn remove(&mut self, secret: &str) {
        for entries in self.windows.values_mut() {
            entries.retain(|_, (name, _)| name != secret);
        }
    }

    /// Each secret found in `haystack`, once per secret and form, with where it starts.
    pub fn scan(&self, place: &str, haystack: &[u8]) -> Vec<String> {
        let mut found: BTreeMap<(String, &str), usize> = BTreeMap::new();
        for (window, entries) in &self.windows {
            for (offset, piece) in haystack.windows(*window).enumerate() {
                if let Some((secret, form)) = entries.get(piece) {
                    found.entry((secret.clone(), form)).or_insert(offset);
                }
            }
        }
        found
            .into_iter()
            .map(|((secret, form), offset)| format!("{place}: {secret} ({form}) at byte {offset}"))
            .collect()
    }
}

fn base64(bytes: &[u8], plus: u8, slash: u8) -> String {
    let mut alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789??".to_vec();
    (alphabet[62], alphabet[63]) = (plus, slash);
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, byte)| n | u32::from(*byte) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let (mut out, mut buffer, mut bits) = (String::new(), 0u64, 0);
    for byte in bytes {
        buffer = buffer << 8 | u64::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[(buffer >> bits & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[(buffer << (5 - bits) & 31) as usize] as char);
    }
    out
}

fn base58(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let mut digits: Vec<u8> = Vec::new();
    for byte in bytes {
        let mut carry = u32::from(*byte);
        for digit in &mut digits {
            carry += u32::from(*digit) << 8;
            *digit = (carry % 58) as u8;
            carry /= 58;
        }
        while carry > 0 {
            digits.push((carry % 58) as u8);
            carry /= 58;
        }
    }
    let zeros = bytes.iter().take_while(|byte| **byte == 0).count();
    std::iter::repeat_n('1', zeros).chain(digits.iter().rev().map(|digit| ALPHABET[*digit as usize] as char)).collect()
}

/// The encoders the scan relies on, against RFC 4648's vectors and a principal's own base58btc.
#[test]
fn encoders_match_known_vectors() {
    assert_eq!(base64(b"foobar", b'+', b'/'), "Zm9vYmFy");
    assert_eq!(base64(b"fo", b'+', b'/'), "Zm8");
    assert_eq!(base64(&[0xfb, 0xff], b'-', b'_'), "-_8");
    assert_eq!(base32(b"foobar"), "mzxw6ytboi");
    assert_eq!(base32(b"f"), "my");
    use seed_agents_protocol::{Ed25519Signer, Signer as _};
    let principal = Ed25519Signer::generate().unwrap().principal();
    assert_eq!(format!("z{}", base58(principal.as_bytes())), principal.to_string());
    assert_eq!(base58(&[0, 0, 1]), "112");
}
