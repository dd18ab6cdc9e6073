//! Arbitrary UTF-8 strings as client memory paths (`server-core/src/memory_path.rs`).
//!
//! `MemoryPath::parse` must not panic and refuses only with a 400. An accepted path is normalised:
//! no `..`, `.` or empty segment, no leading `/`, no `\` or NUL, at most `MAX_BYTES` bytes and
//! `MAX_DEPTH` segments; its segments are the input's non-empty, non-`.` ones; parsing it again
//! gives it back; and joined under a root it stays under that root, one component per segment.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use seed_agents_server_core::error::ErrorKind;
use seed_agents_server_core::memory_path::{MAX_BYTES, MAX_DEPTH, MemoryPath};

fuzz_target!(|raw: &str| {
    let path = match MemoryPath::parse(raw) {
        Ok(path) => path,
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::Invalid, "{raw:?}: {}", error.message());
            return;
        }
    };
    let normal = path.as_str();
    assert!(!normal.is_empty() && normal.len() <= MAX_BYTES, "{raw:?} -> {normal:?}");
    assert!(!normal.starts_with('/') && !normal.contains('\\') && !normal.contains('\0'), "{raw:?} -> {normal:?}");
    let segments: Vec<&str> = path.segments().collect();
    assert!(segments.len() <= MAX_DEPTH, "{raw:?} -> {normal:?}");
    for segment in &segments {
        assert!(!matches!(*segment, "" | "." | ".."), "{raw:?} -> {normal:?}");
    }
    let slashed = raw.replace('\\', "/");
    let expected: Vec<&str> = slashed.split('/').filter(|segment| !matches!(*segment, "" | ".")).collect();
    assert_eq!(segments, expected, "{raw:?}");
    assert_eq!(Some(path.file_name()), segments.last().copied());

    let again = MemoryPath::parse(normal).expect("a normalised path parses");
    assert_eq!(again, path, "normalising twice changed {raw:?}");

    let root = Path::new("/srv/agent/memory");
    let under = path.under(root);
    assert!(under.starts_with(root), "{raw:?} escapes: {}", under.display());
    assert_eq!(under.components().count(), root.components().count() + segments.len(), "{raw:?}");
});
