//! What the monitor reads off one feed event (docs/hypermedia.md §4.1–4.3): its key, the key a
//! firing dedupes on, its time, a summary, and canonical resource ids.
//!
//! Events come in two shapes: resolved `LoadedEvent`s (what `ListEvents` answers: `type`
//! `comment`, `citation`, `doc-update`, `capability`, `contact`) and raw daemon events
//! (`newBlob` / `newMention`, possibly under `data: {case, value}`). Both are read.

use serde_json::{Map, Value as Json};

/// A feed event, as the Hypermedia server sent it.
pub(crate) type Event = Map<String, Json>;

/// The event's identity: `feedEventId`; else `<type>-<id>`; else `blob-<cid>` / `blob-id-<id>`
/// of a raw blob; else `mention-<cid>-<mentionType>-<target>` of a raw mention; else none (the
/// event is skipped).
pub(crate) fn event_key(event: &Event) -> Option<String> {
    if let Some(id) = text(event, "feedEventId") {
        return Some(id);
    }
    if let (Some(id), Some(kind)) = (text(event, "id"), text(event, "type")) {
        return Some(format!("{kind}-{id}"));
    }
    if let Some(blob) = raw_blob(event) {
        if let Some(cid) = text(blob, "cid").filter(|cid| cid != "undefined") {
            return Some(format!("blob-{cid}"));
        }
        if let Some(id) = text(blob, "blobId").or_else(|| text(blob, "blob_id")) {
            return Some(format!("blob-id-{id}"));
        }
    }
    let mention = raw_mention(event)?;
    let source = object(mention, "sourceBlob").or_else(|| object(mention, "source_blob"))?;
    let cid = text(source, "cid").filter(|cid| cid != "undefined")?;
    let target = text(mention, "target")?;
    let kind = text(mention, "mentionType").or_else(|| text(mention, "mention_type")).unwrap_or_default();
    Some(format!("mention-{cid}-{kind}-{target}"))
}

/// The key a firing dedupes on: the event key, except that a mention key
/// (`mention-<cid>--<target>`) collapses onto `blob-<cid>`, the key of the comment it came from,
/// so a comment and its citation twin fire a trigger once.
pub(crate) fn firing_key(event: &Event) -> Option<String> {
    let key = event_key(event)?;
    if let Some(rest) = key.strip_prefix("mention-")
        && let Some((cid, _)) = rest.split_once("--")
        && !cid.is_empty()
    {
        return Some(format!("blob-{cid}"));
    }
    Some(key)
}

/// When the event happened, in Unix ms: `eventAtMs`; else `time` (RFC 3339 or `{seconds,
/// nanos}`); else the later of `eventTime` and `observeTime`.
pub(crate) fn event_time_ms(event: &Event) -> Option<i64> {
    if let Some(at) = event.get("eventAtMs").and_then(number_ms) {
        return Some(at);
    }
    if let Some(at) = event.get("time").and_then(timestamp_ms) {
        return Some(at);
    }
    let event_time = event.get("eventTime").and_then(timestamp_ms);
    let observe_time = event.get("observeTime").and_then(timestamp_ms);
    event_time.max(observe_time)
}

/// A short summary for session titles: `<blobType> on <resource>`, `Mention of <target>`,
/// `<type> on <target name>`, or the type.
pub(crate) fn summary(event: &Event) -> String {
    if let Some(blob) = raw_blob(event) {
        let kind = text(blob, "blobType").or_else(|| text(blob, "blob_type")).unwrap_or_else(|| "activity".into());
        return match text(blob, "resource") {
            Some(resource) => format!("{kind} on {resource}"),
            None => kind,
        };
    }
    if let Some(mention) = raw_mention(event) {
        let target = text(mention, "target").unwrap_or_else(|| "unknown target".into());
        return match text(mention, "source") {
            Some(source) => format!("Mention of {target} from {source}"),
            None => format!("Mention of {target}"),
        };
    }
    let kind = text(event, "type");
    let name =
        object(event, "target").and_then(|target| object(target, "metadata")).and_then(|meta| text(meta, "name"));
    match (kind, name) {
        (kind, Some(name)) => format!("{} on {name}", kind.as_deref().unwrap_or("activity")),
        (Some(kind), None) => kind,
        (None, None) => "Seed activity".to_owned(),
    }
}

/// A resource id as triggers compare it: `hm://<uid>[/<path>]` without version, block
/// reference, query or trailing slash; `https://<host>/hm/<uid>/<path>` becomes the same (view
/// terms such as `:comments` dropped). Anything else loses its query, fragment and trailing `/`.
pub(crate) fn canonical_resource(value: &str) -> String {
    let trimmed = value.trim();
    let bare = trimmed.split(['?', '#']).next().unwrap_or_default();
    if let Some(rest) = bare.strip_prefix("hm://") {
        let mut segments = rest.split('/').filter(|segment| !segment.is_empty());
        let Some(uid) = segments.next() else { return "hm://".to_owned() };
        return join(uid, segments);
    }
    for scheme in ["https://", "http://"] {
        if let Some(rest) = bare.strip_prefix(scheme) {
            let mut segments = rest.split('/').skip(1).filter(|segment| !segment.is_empty());
            if segments.by_ref().any(|segment| segment == "hm")
                && let Some(uid) = segments.next()
            {
                return join(uid, segments.filter(|segment| !segment.starts_with(':')));
            }
        }
    }
    bare.trim_end_matches('/').to_owned()
}

fn join<'a>(uid: &str, segments: impl Iterator<Item = &'a str>) -> String {
    let mut id = format!("hm://{uid}");
    for segment in segments {
        id.push('/');
        id.push_str(segment);
    }
    id
}

/// Whether `resource` is `prefix` or lies under it (the next character after the prefix is a
/// path, query or fragment separator). Both should be canonical.
pub(crate) fn under(resource: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    match resource.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with(['/', '?', '#']),
        None => false,
    }
}

/// The raw `newBlob` of a daemon-shaped event.
pub(crate) fn raw_blob(event: &Event) -> Option<&Event> {
    object(event, "newBlob").or_else(|| object(event, "new_blob")).or_else(|| data_value(event, "newBlob"))
}

/// The raw `newMention` of a daemon-shaped event.
pub(crate) fn raw_mention(event: &Event) -> Option<&Event> {
    object(event, "newMention").or_else(|| object(event, "new_mention")).or_else(|| data_value(event, "newMention"))
}

/// `data.case` of a daemon-shaped event.
pub(crate) fn data_case(event: &Event) -> Option<String> {
    object(event, "data").and_then(|data| text(data, "case"))
}

fn data_value<'a>(event: &'a Event, case: &str) -> Option<&'a Event> {
    let data = object(event, "data")?;
    (text(data, "case").as_deref() == Some(case)).then(|| object(data, "value")).flatten()
}

/// A field that is an object.
pub(crate) fn object<'a>(record: &'a Event, field: &str) -> Option<&'a Event> {
    record.get(field).and_then(Json::as_object)
}

/// A field that is a string (or a number, as its text).
pub(crate) fn text(record: &Event, field: &str) -> Option<String> {
    match record.get(field)? {
        Json::String(text) => Some(text.clone()),
        Json::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// `record.<field>.id` when it is an object with a string `id` (an unpacked hm id's full id).
pub(crate) fn id_of(record: &Event, field: &str) -> Option<String> {
    let value = object(record, field)?;
    match object(value, "id") {
        Some(id) => text(id, "id"),
        None => text(value, "id"),
    }
}

/// Whether any string inside `value` contains `needle`.
pub(crate) fn contains_text(value: &Json, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    match value {
        Json::String(text) => text.contains(needle),
        Json::Array(items) => items.iter().any(|item| contains_text(item, needle)),
        Json::Object(fields) => fields.values().any(|item| contains_text(item, needle)),
        Json::Null | Json::Bool(_) | Json::Number(_) => false,
    }
}

fn number_ms(value: &Json) -> Option<i64> {
    match value {
        Json::Number(number) => number.as_i64().or_else(|| number.as_f64().map(|ms| ms as i64)),
        Json::String(text) => text.trim().parse::<f64>().ok().filter(|ms| ms.is_finite()).map(|ms| ms as i64),
        _ => None,
    }
}

fn timestamp_ms(value: &Json) -> Option<i64> {
    match value {
        Json::Number(_) => number_ms(value),
        Json::String(text) => text.parse::<jiff::Timestamp>().ok().map(|at| at.as_millisecond()),
        Json::Object(fields) => {
            let seconds = fields.get("seconds").and_then(number_ms)?;
            let nanos = fields.get("nanos").or_else(|| fields.get("nanosSinceSecond")).and_then(number_ms).unwrap_or(0);
            seconds.checked_mul(1000).map(|ms| ms + nanos / 1_000_000)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(value: Json) -> Event {
        match value {
            Json::Object(event) => event,
            _ => unreachable!(),
        }
    }

    #[test]
    fn keys_prefer_the_feed_id_and_collapse_citations_onto_their_comment() {
        let comment = event(json!({"feedEventId": "blob-bafyC", "id": "bafyC", "type": "comment"}));
        assert_eq!(event_key(&comment).as_deref(), Some("blob-bafyC"));
        assert_eq!(firing_key(&comment).as_deref(), Some("blob-bafyC"));
        let citation = event(json!({"feedEventId": "mention-bafyC--hm://z6Mk/:profile", "type": "citation"}));
        assert_eq!(event_key(&citation).as_deref(), Some("mention-bafyC--hm://z6Mk/:profile"));
        assert_eq!(firing_key(&citation).as_deref(), Some("blob-bafyC"));
        assert_eq!(event_key(&event(json!({"id": "x", "type": "doc-update"}))).as_deref(), Some("doc-update-x"));
        assert_eq!(event_key(&event(json!({"newBlob": {"cid": "bafyB"}}))).as_deref(), Some("blob-bafyB"));
        let raw = event(
            json!({"data": {"case": "newMention", "value": {"sourceBlob": {"cid": "bafyM"}, "target": "hm://u"}}}),
        );
        assert_eq!(event_key(&raw).as_deref(), Some("mention-bafyM--hm://u"));
        assert_eq!(firing_key(&raw).as_deref(), Some("blob-bafyM"));
        assert_eq!(event_key(&event(json!({"type": "comment"}))), None);
    }

    #[test]
    fn times_come_from_the_best_field() {
        assert_eq!(event_time_ms(&event(json!({"eventAtMs": 5, "time": "2026-01-01T00:00:00Z"}))), Some(5));
        assert_eq!(event_time_ms(&event(json!({"time": "1970-01-01T00:00:01Z"}))), Some(1000));
        assert_eq!(event_time_ms(&event(json!({"time": {"seconds": 2, "nanos": 5_000_000}}))), Some(2005));
        assert_eq!(event_time_ms(&event(json!({"eventTime": 3, "observeTime": 9}))), Some(9));
        assert_eq!(event_time_ms(&event(json!({}))), None);
    }

    #[test]
    fn resources_are_canonical_and_prefixes_respect_path_boundaries() {
        assert_eq!(canonical_resource("hm://z6Mk/docs/a/?v=bafy&l#blk"), "hm://z6Mk/docs/a");
        assert_eq!(canonical_resource(" hm://z6Mk/ "), "hm://z6Mk");
        assert_eq!(canonical_resource("https://site.example/hm/z6Mk/docs/:comments"), "hm://z6Mk/docs");
        assert!(under("hm://z6Mk/docs/a", "hm://z6Mk/docs"));
        assert!(under("hm://z6Mk/docs", "hm://z6Mk/docs/"));
        assert!(!under("hm://z6Mk/docs2", "hm://z6Mk/docs"));
        assert!(!under("hm://z6Mk", "hm://z6Mk/docs"));
    }
}
