//! Envelope benchmarks: the client path (encode and sign) and the server path (decode and verify)
//! on a typical `MessageSession` envelope, against a bare `verify_strict` over the same bytes.
//!
//! `decode_only`, `signing_bytes_only` and `verifying_key_only` are the parts of `decode_verify`
//! that `bare_verify_strict` does not pay, so the overhead can be attributed.
//!
//! `upload_chunk_*` encode the signing bytes of an 8 MiB `AppendFileUploadChunk` (what the SDK
//! signs for every upload chunk), against `copy_8mib`, a plain copy of the same payload.
//!
//! ```text
//! cargo bench -p seed-agents-protocol --bench envelope -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ed25519_dalek::{Signature, VerifyingKey};
use ipld_core::ipld::Ipld;
use seed_agents_protocol::envelope::{KeyCache, TIMESTAMP_WINDOW_MS, insert_signature};
use seed_agents_protocol::generated::{
    AppendFileUploadChunk, MessageSession, MessageSessionContentPart, TextContentPart,
};
use seed_agents_protocol::{AgentAction, Ed25519Signer, SignedEnvelope, Signer, UnsignedEnvelope, wire};

/// 2026-01-01T00:00:00Z.
const TS: i64 = 1_767_225_600_000;

/// A typical user message: one text part of about 200 characters.
fn typed_action() -> AgentAction {
    let text = "Please summarise the last three design documents in this space, list the open \
                questions each one raises, and propose an order in which to resolve them so \
                that the release can still ship by Friday noon."
        .to_owned();
    AgentAction::MessageSession(
        MessageSession::new(
            vec![MessageSessionContentPart::TextContentPart(TextContentPart::new(text))],
            "session-01JH5Z8Q3V6W7X8Y9Z0A1B2C3D",
        )
        .client_message_id("msg-01JH5Z9R4T5U6V7W8X9Y0Z1A2B"),
    )
}

/// The client path: typed action -> IPLD (+ `ts`) -> signing bytes -> Ed25519 -> envelope bytes.
fn encode_sign(signer: &Ed25519Signer, action: &AgentAction) -> Vec<u8> {
    let mut action = wire::to_ipld(action).expect("action converts to IPLD");
    if let Ipld::Map(map) = &mut action {
        map.insert("ts".into(), TS.into());
    }
    let envelope =
        UnsignedEnvelope { signer: signer.principal(), account: signer.principal(), protocol: Some(3), action };
    let mut bytes = envelope.signing_bytes().expect("envelope encodes");
    let signature = signer.sign_now(&bytes);
    insert_signature(&mut bytes, &signature).expect("sig is first");
    bytes
}

/// The size of an upload chunk.
const CHUNK: usize = 8 * 1024 * 1024;

/// An unsigned envelope carrying an 8 MiB upload chunk.
fn upload_chunk_envelope(signer: &Ed25519Signer) -> UnsignedEnvelope {
    let content: Vec<u8> = (0..CHUNK).map(|i| (i % 251) as u8).collect();
    let action = AgentAction::AppendFileUploadChunk(AppendFileUploadChunk::new(
        content,
        3 * CHUNK as i64,
        "upload-01JH5Z8Q3V6W7X8Y9Z0A1B2C3D",
    ));
    let mut action = wire::to_ipld(&action).expect("action converts to IPLD");
    if let Ipld::Map(map) = &mut action {
        map.insert("ts".into(), TS.into());
    }
    UnsignedEnvelope { signer: signer.principal(), account: signer.principal(), protocol: Some(3), action }
}

fn upload_chunk_benches(c: &mut Criterion) {
    let signer = Ed25519Signer::from_seed(&[7; 32]);
    let envelope = upload_chunk_envelope(&signer);
    let mut bytes = envelope.signing_bytes().expect("envelope encodes");
    let signature = signer.sign_now(&bytes);
    insert_signature(&mut bytes, &signature).expect("sig is first");
    let decoded = SignedEnvelope::decode(&bytes).expect("envelope decodes");
    assert_eq!(decoded.reencoded_signing_bytes().expect("re-encodes"), envelope.signing_bytes().expect("encodes"));
    let payload = vec![0x5a_u8; CHUNK];

    let mut group = c.benchmark_group("envelope");
    group.sample_size(30);
    group.bench_function("upload_chunk_signing_bytes", |b| {
        b.iter(|| black_box(&envelope).signing_bytes().expect("encodes"))
    });
    group.bench_function("upload_chunk_reencoded_signing_bytes", |b| {
        b.iter(|| black_box(&decoded).reencoded_signing_bytes().expect("re-encodes"))
    });
    group.bench_function("copy_8mib", |b| b.iter(|| black_box(&payload).to_vec()));
    group.finish();
}

fn benches(c: &mut Criterion) {
    let signer = Ed25519Signer::from_seed(&[7; 32]);
    let action = typed_action();

    let bytes = encode_sign(&signer, &action);
    let decoded = SignedEnvelope::decode(&bytes).expect("envelope decodes");
    let signing_bytes = decoded.signing_bytes().expect("envelope re-encodes");
    // Ed25519 is deterministic: this is the signature the envelope carries.
    let signature = Signature::from_bytes(&signer.sign_now(&signing_bytes));
    let key = signer.principal().verifying_key().expect("valid key");
    let public_key = *signer.principal().public_key();

    // The setup must be the real thing: the bytes verify, and both paths sign the same message.
    key.verify_strict(&signing_bytes, &signature).expect("bare verify");
    let verified = SignedEnvelope::decode(&bytes).expect("decodes").verify(TS).expect("verifies");
    assert_eq!(verified.action_name(), "MessageSession");
    eprintln!("envelope: {} bytes", bytes.len());

    let mut group = c.benchmark_group("envelope");
    group.bench_function("encode_sign", |b| b.iter(|| encode_sign(black_box(&signer), black_box(&action))));
    group.bench_function("decode_verify", |b| {
        b.iter(|| SignedEnvelope::decode(black_box(&bytes)).expect("decodes").verify(black_box(TS)).expect("verifies"))
    });
    let keys = KeyCache::new();
    group.bench_function("decode_verify_cached_key", |b| {
        b.iter(|| {
            SignedEnvelope::decode(black_box(&bytes))
                .expect("decodes")
                .verify_with(black_box(TS), TIMESTAMP_WINDOW_MS, Some(&keys))
                .expect("verifies")
        })
    });
    group.bench_function("bare_verify_strict", |b| {
        b.iter(|| black_box(&key).verify_strict(black_box(&signing_bytes), black_box(&signature)))
    });
    group.bench_function("decode_only", |b| b.iter(|| SignedEnvelope::decode(black_box(&bytes)).expect("decodes")));
    group.bench_function("signing_bytes_only", |b| b.iter(|| black_box(&decoded).signing_bytes().expect("re-encodes")));
    group.bench_function("reencoded_signing_bytes_only", |b| {
        b.iter(|| black_box(&decoded).reencoded_signing_bytes().expect("re-encodes"))
    });
    group.bench_function("verifying_key_only", |b| {
        b.iter(|| VerifyingKey::from_bytes(black_box(&public_key)).expect("valid key"))
    });
    group.finish();
}

criterion_group!(envelope, benches, upload_chunk_benches);
criterion_main!(envelope);
