//! MIME types inferred from file extensions (upstream's table, in upstream's order).

/// Extension → MIME type. Order matters: [`extension_for`] returns the first match.
const MIME_TYPES: &[(&str, &str)] = &[
    ("md", "text/markdown"),
    ("txt", "text/plain"),
    ("csv", "text/csv"),
    ("json", "application/json"),
    ("html", "text/html"),
    ("css", "text/css"),
    ("js", "text/javascript"),
    ("ts", "text/plain"),
    ("xml", "application/xml"),
    ("yaml", "text/plain"),
    ("yml", "text/plain"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("svg", "image/svg+xml"),
    ("ico", "image/x-icon"),
    ("mp3", "audio/mpeg"),
    ("wav", "audio/wav"),
    ("ogg", "audio/ogg"),
    ("m4a", "audio/mp4"),
    ("flac", "audio/flac"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mov", "video/quicktime"),
    ("mkv", "video/x-matroska"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("wasm", "application/wasm"),
];

/// The MIME type of a path by its extension. As upstream, the "extension" is whatever follows
/// the last `.`, or the whole path when there is none (so a file named `md` is markdown).
pub(crate) fn infer(path: &str) -> Option<String> {
    let ext = path.rsplit('.').next()?.to_lowercase();
    MIME_TYPES.iter().find(|(known, _)| *known == ext).map(|(_, mime)| (*mime).to_owned())
}

/// The first extension whose MIME type is `content_type` (parameters ignored).
pub(crate) fn extension_for(content_type: &str) -> Option<&'static str> {
    let bare = content_type.split(';').next()?.trim().to_lowercase();
    MIME_TYPES.iter().find(|(_, mime)| *mime == bare).map(|(ext, _)| *ext)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infers_by_extension_like_upstream() {
        assert_eq!(infer("notes/a.MD").as_deref(), Some("text/markdown"));
        assert_eq!(infer("pic.jpeg").as_deref(), Some("image/jpeg"));
        assert_eq!(infer("md").as_deref(), Some("text/markdown"));
        assert_eq!(infer("notes/readme"), None);
        assert_eq!(extension_for("text/plain; charset=utf-8"), Some("txt"));
        assert_eq!(extension_for("IMAGE/JPEG"), Some("jpg"));
        assert_eq!(extension_for("application/octet-stream"), None);
    }
}
