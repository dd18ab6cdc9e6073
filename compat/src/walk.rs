//! Small helpers for editing generic IPLD maps.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;

/// The map's `_` (or `type`) tag.
pub fn tag<'a>(map: &'a BTreeMap<String, Ipld>, key: &str) -> Option<&'a str> {
    match map.get(key) {
        Some(Ipld::String(tag)) => Some(tag),
        _ => None,
    }
}

/// An edit applied to a map, given the key it sits under.
pub type MapEdit<'e> = dyn FnMut(Option<&str>, &mut BTreeMap<String, Ipld>) + 'e;

/// Calls `edit` on every map reachable from `value` (depth first, parents before children),
/// with the key it sits under (`None` for list items and the root).
pub fn each_map(value: &mut Ipld, edit: &mut MapEdit<'_>) {
    fn go(key: Option<&str>, value: &mut Ipld, edit: &mut MapEdit<'_>) {
        match value {
            Ipld::Map(map) => {
                edit(key, map);
                for (child_key, child) in map.iter_mut() {
                    go(Some(child_key.as_str()), child, edit);
                }
            }
            Ipld::List(items) => {
                for item in items {
                    go(key, item, edit);
                }
            }
            _ => {}
        }
    }
    go(None, value, edit);
}
