//! `attachment:<id>`: one of the session's attachments. Text is shown inline; an image goes to a
//! model that takes images with the result (the stored result says `shownAsImage` and keeps no
//! bytes); anything else, and any image for a user verb or a text-only model, is described.

use seed_agents_protocol::Value;
use serde::Serialize;

use super::{Context, MAX_RESULT_BYTES, record};
use crate::attachments;
use crate::error::ApiResult;
use crate::memory::download::blocking;

#[derive(Serialize)]
struct Shown<'a> {
    id: &'a str,
    name: &'a str,
    #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
    mime_type: Option<&'a str>,
    size: i64,
    #[serde(rename = "shownAsImage")]
    shown_as_image: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
}

/// The largest image handed to a model inline (docs/runtime.md §4: 4.5 MB).
const MAX_INLINE_IMAGE: usize = 4_718_592;

/// Image types both vendors take inline.
const INLINE_IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Whether a MIME type is text a reader can take as is.
fn is_text(mime_type: Option<&str>) -> bool {
    let Some(mime_type) = mime_type else { return false };
    let essence = mime_type.split(';').next().unwrap_or("").trim();
    mime_type.starts_with("text/")
        || ["application/json", "application/xml", "application/x-yaml", "application/javascript"].contains(&essence)
}

pub(super) async fn read(context: &Context<'_>, id: String) -> ApiResult<Value> {
    let dir = attachments::session_dir(&attachments::root(&context.app.config), context.session()?)?;
    let (info, data) = blocking(move || attachments::read(&dir, &id)).await?;
    let mime_type = info.mime_type.as_deref();
    let mut shown =
        Shown { id: &info.id, name: &info.name, mime_type, size: info.size, shown_as_image: false, content: None };
    let essence = mime_type.map(|mime| mime.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let inline_image = essence.as_deref().filter(|essence| INLINE_IMAGE_TYPES.contains(essence));
    let summary =
        if let Some(image_type) = inline_image.filter(|_| data.len() <= MAX_INLINE_IMAGE && context.takes_images()) {
            shown.shown_as_image = true;
            context.show_image(crate::model::Image { mime: image_type.to_owned(), data });
            format!("Showing {} ({image_type}, {} bytes) as an image.", info.name, info.size)
        } else if is_text(mime_type) && data.len() <= MAX_RESULT_BYTES {
            shown.content = Some(String::from_utf8_lossy(&data).into_owned());
            format!("Read {} ({} bytes).", info.name, info.size)
        } else {
            let reason = match mime_type {
                Some(_) if inline_image.is_some() && info.size > MAX_INLINE_IMAGE as i64 => {
                    "it is too large to show inline (over 4.5 MB)"
                }
                Some(mime) if mime.starts_with("image/") => "images are not shown inline here",
                _ => "the content is not viewable inline",
            };
            format!(
                "{} ({}, {} bytes); {reason}. Save it to memory with write ~/memory/<path> and options.fromAttachment.",
                info.name,
                mime_type.unwrap_or("unknown type"),
                info.size
            )
        };
    record(summary, &shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_types_are_recognised() {
        assert!(is_text(Some("text/plain")));
        assert!(is_text(Some("application/json; charset=utf-8")));
        assert!(!is_text(Some("image/png")));
        assert!(!is_text(None));
    }
}
