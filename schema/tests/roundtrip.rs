//! Round-trip properties for every action and response of the schema.
//!
//! Instances are generated from the JSON Schema itself (so a new action is covered the moment it
//! is added): a seeded walker builds a generic IPLD value that conforms to the definition, then:
//! - typed decode of the generic value succeeds;
//! - typed → CBOR equals the canonical encoding of the generic value (nothing dropped, added or
//!   reordered: absent stays absent, null stays null, bytes stay bytes, ints stay ints);
//! - typed → CBOR → generic → CBOR is byte-identical;
//! - typed decode of that generic value gives back an equal typed value.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use proptest::prelude::*;
use seed_agents_protocol::generated::AgentWsEvent;
use seed_agents_protocol::{AgentAction, AgentResponse, wire};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use seed_agents_test_support::schema::{defs, ref_target};

/// A small deterministic generator (xorshift64*), seeded by proptest.
struct Gen<'a> {
    state: u64,
    defs: &'a BTreeMap<String, Json>,
}

impl Gen<'_> {
    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self) -> bool {
        self.below(2) == 0
    }

    fn string(&mut self) -> String {
        const PIECES: &[&str] = &["a", "Z", "0", " ", "-", "é", "日本", "😀", "\n", "\"", "agent", "x/y"];
        (0..self.below(6)).map(|_| PIECES[self.below(PIECES.len() as u64) as usize]).collect()
    }

    fn integer(&mut self) -> Ipld {
        const EDGES: &[i64] = &[
            0,
            1,
            -1,
            23,
            24,
            255,
            256,
            65_535,
            65_536,
            4_294_967_295,
            4_294_967_296,
            9_007_199_254_740_991,
            -9_007_199_254_740_991,
            1_767_225_600_000,
        ];
        if self.chance() {
            Ipld::Integer(EDGES[self.below(EDGES.len() as u64) as usize].into())
        } else {
            Ipld::Integer((self.next() as i64 >> 11).into())
        }
    }

    fn fraction(&mut self) -> Ipld {
        // A non-integer float, or a whole number as an integer (that is how it is canonical).
        if self.chance() { Ipld::Float((self.below(1_000_000) as f64) / 7.0 + 0.5) } else { self.integer() }
    }

    fn bytes(&mut self) -> Ipld {
        Ipld::Bytes((0..self.below(40)).map(|_| self.next() as u8).collect())
    }

    /// Any open value.
    fn open(&mut self, depth: u32) -> Ipld {
        match self.below(if depth > 2 { 6 } else { 8 }) {
            0 => Ipld::Null,
            1 => Ipld::Bool(self.chance()),
            2 => self.integer(),
            3 => Ipld::Float(self.below(1000) as f64 + 0.25),
            4 => Ipld::String(self.string()),
            5 => self.bytes(),
            6 => Ipld::List((0..self.below(3)).map(|_| self.open(depth + 1)).collect()),
            _ => Ipld::Map(
                (0..self.below(3)).map(|i| (format!("k{i}{}", self.string()), self.open(depth + 1))).collect(),
            ),
        }
    }

    fn value(&mut self, schema: &Json, depth: u32) -> Ipld {
        if let Some(name) = ref_target(schema) {
            let def = self.defs.get(name).unwrap_or_else(|| panic!("missing {name}")).clone();
            return self.value(&def, depth + 1);
        }
        if let Some(path) = schema.get("x-rust-type").and_then(|x| x["path"].as_str()) {
            return match path.rsplit("::").next() {
                Some("Bytes") => self.bytes(),
                Some("Float") => self.fraction(),
                _ => self.open(depth),
            };
        }
        if let Some(value) = schema.get("const") {
            return json_scalar(value);
        }
        if let Some(values) = schema.get("enum").and_then(Json::as_array) {
            return json_scalar(&values[self.below(values.len() as u64) as usize]);
        }
        if let Some(alts) = schema.get("oneOf").and_then(Json::as_array) {
            if schema.get("x-open") == Some(&Json::Bool(true)) && self.below(4) == 0 {
                let tag = schema["x-discriminator"].as_str().unwrap_or("type");
                let mut map = BTreeMap::new();
                map.insert(tag.to_owned(), Ipld::String("zz-unknown-kind".into()));
                map.insert("extra".to_owned(), self.open(depth));
                return Ipld::Map(map);
            }
            let alt = alts[self.below(alts.len() as u64) as usize].clone();
            return self.value(&alt, depth);
        }
        match schema.get("type").and_then(Json::as_str) {
            Some("string") => Ipld::String(self.string()),
            Some("integer") => self.integer(),
            Some("number") => self.fraction(),
            Some("boolean") => Ipld::Bool(self.chance()),
            Some("null") => Ipld::Null,
            Some("array") => {
                let count = if depth > 4 { 0 } else { self.below(3) };
                Ipld::List((0..count).map(|_| self.value(&schema["items"], depth + 1)).collect())
            }
            Some("object") => self.object(schema, depth),
            _ => self.open(depth),
        }
    }

    fn object(&mut self, schema: &Json, depth: u32) -> Ipld {
        let required: Vec<&str> =
            schema["required"].as_array().map(|r| r.iter().filter_map(Json::as_str).collect()).unwrap_or_default();
        let mut map = BTreeMap::new();
        if let Some(props) = schema.get("properties").and_then(Json::as_object) {
            for (name, prop) in props {
                let is_required = required.contains(&name.as_str());
                if !is_required && (depth > 4 || self.chance()) {
                    continue;
                }
                let nullable = prop
                    .get("oneOf")
                    .and_then(Json::as_array)
                    .is_some_and(|alts| alts.iter().any(|a| a["type"] == "null"));
                let value = if nullable && self.chance() { Ipld::Null } else { self.value(prop, depth + 1) };
                map.insert(name.clone(), value);
            }
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|e| e.is_object()) {
            for index in 0..self.below(3) {
                map.insert(format!("extra{index}"), self.value(extra, depth + 1));
            }
        }
        Ipld::Map(map)
    }
}

fn json_scalar(value: &Json) -> Ipld {
    match value {
        Json::String(s) => Ipld::String(s.clone()),
        Json::Bool(b) => Ipld::Bool(*b),
        Json::Number(n) => Ipld::Integer(n.as_i64().unwrap_or_default().into()),
        _ => Ipld::Null,
    }
}

/// Checks the four round-trip properties for one generic instance of `T`.
fn check<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    name: &str,
    generic: Ipld,
) -> Result<(), TestCaseError> {
    let canonical = wire::ipld_to_vec(&generic).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    let typed: T = wire::from_ipld(generic.clone())
        .map_err(|e| TestCaseError::fail(format!("{name}: typed decode of {generic:?}: {e}")))?;
    let encoded = wire::to_vec(&typed).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert_eq!(&encoded, &canonical, "{}: typed encoding differs from the generic one for {:?}", name, generic);
    let back = wire::decode_ipld(&encoded).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert_eq!(wire::ipld_to_vec(&back).map_err(|e| TestCaseError::fail(e.to_string()))?, encoded);
    let again: T = wire::from_ipld(back).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
    prop_assert_eq!(again, typed);
    Ok(())
}

fn run_all(
    seed: u64,
    kind: &str,
    mut each: impl FnMut(&str, Ipld) -> Result<(), TestCaseError>,
) -> Result<usize, TestCaseError> {
    let defs = defs();
    let mut generator = Gen { state: seed | 1, defs: &defs };
    let mut count = 0;
    for (name, schema) in &defs {
        if schema.get("x-kind").and_then(Json::as_str) != Some(kind) {
            continue;
        }
        let generic = generator.value(schema, 0);
        each(name, generic)?;
        count += 1;
    }
    Ok(count)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_action_round_trips(seed in any::<u64>()) {
        let count = run_all(seed, "action", check::<AgentAction>)?;
        prop_assert!(count >= 74);
    }

    #[test]
    fn every_response_round_trips(seed in any::<u64>()) {
        let count = run_all(seed, "response", check::<AgentResponse>)?;
        prop_assert!(count >= 68);
    }

    #[test]
    fn every_websocket_frame_round_trips(seed in any::<u64>()) {
        let defs = defs();
        let mut generator = Gen { state: seed | 1, defs: &defs };
        for _ in 0..8 {
            let frame = generator.value(&defs["AgentWSEvent"], 0);
            check::<AgentWsEvent>("AgentWSEvent", frame)?;
        }
    }
}

#[test]
fn an_unknown_session_event_kind_is_kept_as_an_open_value() {
    use seed_agents_protocol::generated::SessionEventPayload;
    let mut map = BTreeMap::new();
    map.insert("type".to_owned(), Ipld::String("future_kind".into()));
    map.insert("blob".to_owned(), Ipld::Bytes(vec![1, 2]));
    let payload: SessionEventPayload = wire::from_ipld(Ipld::Map(map.clone())).expect("decode");
    assert!(matches!(payload, SessionEventPayload::Other(_)));
    assert_eq!(wire::to_vec(&payload).expect("encode"), wire::ipld_to_vec(&Ipld::Map(map)).expect("encode"));
}

#[test]
fn bytes_and_text_stay_apart_in_untagged_unions() {
    use seed_agents_protocol::generated::WriteAgentMemoryFileContent;
    let text: WriteAgentMemoryFileContent = wire::from_ipld(Ipld::String("hi".into())).expect("text");
    assert!(matches!(text, WriteAgentMemoryFileContent::String(_)));
    let bytes: WriteAgentMemoryFileContent = wire::from_ipld(Ipld::Bytes(b"hi".to_vec())).expect("bytes");
    assert!(matches!(bytes, WriteAgentMemoryFileContent::Bytes(_)));
}

#[test]
fn tri_state_fields_keep_absent_null_and_value_apart() {
    use seed_agents_protocol::Nullable;
    use seed_agents_protocol::generated::UpdateSession;
    let decode = |extra: Option<Ipld>| {
        let mut map = BTreeMap::new();
        map.insert("_".to_owned(), Ipld::String("UpdateSession".into()));
        map.insert("sessionId".to_owned(), Ipld::String("s".into()));
        if let Some(value) = extra {
            map.insert("thoroughness".to_owned(), value);
        }
        match wire::from_ipld::<AgentAction>(Ipld::Map(map)).expect("decode") {
            AgentAction::UpdateSession(UpdateSession { thoroughness, .. }) => thoroughness,
            other => panic!("decoded {other:?}"),
        }
    };
    assert_eq!(decode(None), Nullable::Absent);
    assert_eq!(decode(Some(Ipld::Null)), Nullable::Null);
    assert!(matches!(decode(Some(Ipld::String("deep".into()))), Nullable::Value(_)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// `SignedEnvelope::signing_bytes` reuses the received bytes when it can; it must always equal
    /// the canonical re-encoding, whether the bytes were borrowed or taken (`decode_owned`), and
    /// the signature must verify either way.
    #[test]
    fn received_and_reencoded_signing_bytes_agree(seed in any::<u64>()) {
        use seed_agents_protocol::envelope::{SignedEnvelope, UnsignedEnvelope};
        use seed_agents_protocol::{Ed25519Signer, Signer};
        let signer = Ed25519Signer::from_seed(&[9; 32]);
        let ts = 1_767_225_600_000i64;
        run_all(seed, "action", |name, generic| {
            let Ipld::Map(mut action) = generic else { return Ok(()) };
            action.insert("ts".to_owned(), Ipld::Integer(ts.into()));
            let envelope = UnsignedEnvelope { signer: signer.principal(), account: signer.principal(), protocol: Some(3), action: Ipld::Map(action) };
            let mut bytes = envelope.signing_bytes().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let signature = signer.sign_now(&bytes);
            seed_agents_protocol::envelope::insert_signature(&mut bytes, &signature).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let decoded = SignedEnvelope::decode(&bytes).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
            prop_assert_eq!(decoded.signing_bytes().ok(), decoded.reencoded_signing_bytes().ok(), "{}", name);
            let owned = SignedEnvelope::decode_owned(bytes).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
            prop_assert_eq!(owned.signing_bytes().ok(), decoded.signing_bytes().ok(), "{} (owned)", name);
            prop_assert!(decoded.verify(ts).is_ok(), "{} does not verify", name);
            prop_assert!(owned.verify(ts).is_ok(), "{} does not verify (owned)", name);
            Ok(())
        })?;
    }
}
