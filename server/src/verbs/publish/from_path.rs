//! `write hm://<account>/<path>` with `options.fromPath`: a markdown file of the agent's memory
//! published as that document, created when there is none and updated when there is.
//!
//! - The file: `~/memory/<path>` or `<path>`, UTF-8 text of at most 256 KiB.
//! - Frontmatter (optional): a first line `---`, then `key: value` lines, then a line `---`. A
//!   value is text (one pair of surrounding quotes removed), `true`/`false`, or an integer; blank
//!   lines and `#` comments are skipped. Anything else YAML can say (lists, nesting, multi-line
//!   values) is refused with the line, rather than published wrong. The pairs become the
//!   document's metadata; `title` stands for `name` when there is no `name`.
//! - The name: the frontmatter's, else one made from the file name (`notes/weekly-update.md` →
//!   `Weekly update`).
//! - The path: the address's; the account's home (`hm://<account>` or `hm://<account>/`) means a
//!   path made from the name (`Weekly update` → `/weekly-update`).
//! - The body: blocks as for `content` ([`super::markdown`]), its `hm://` links checked.
//! - Images in memory: an image linked by a path (`![chart](chart.png)`, relative to the markdown
//!   file's folder, or `~/memory/<path>`) or an `icon`/`cover`/`seedExperimentalLogo` naming one
//!   is published to IPFS first (as `write ipfs://` does, streamed; a dry run computes the same
//!   URLs and sends nothing) and the document links its `ipfs://` URL instead; a missing one is
//!   refused before anything is published, a `file://` URL always, and none is sent for a write
//!   whose address or signing key is refused. Images in code blocks and inline code are text. A paragraph that is one image becomes an Image block ([`super::markdown`]). The
//!   images stay on IPFS when the document itself is then refused (content-addressed blocks,
//!   harmless and reused by the next attempt).

use std::io::Read as _;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;

use super::document::{self, Mode};
use super::{MAX_CONTENT, Output, Publish, markdown, plain_address};
use crate::error::{ApiError, ApiResult};
use crate::memory::download::blocking;
use crate::memory::path::MemoryPath;
use crate::memory::store;

/// Frontmatter keys that name an image.
const IMAGE_KEYS: &[&str] = &["icon", "cover", "seedExperimentalLogo"];

/// `write hm://…` with `options.fromPath`.
pub(super) async fn write(publish: &Publish<'_, '_>, raw: &str) -> ApiResult<Value> {
    let from = match publish.option("fromPath") {
        Some(Ipld::String(from)) if !from.trim().is_empty() => from.trim(),
        _ => return Err(ApiError::invalid("options.fromPath must name a memory file (~/memory/<path>)")),
    };
    let path = super::super::memory_file_option(from)?;
    let shown = format!("~/memory/{}", path.as_str());
    let root = publish.context.memory_root.clone();
    let folder = path.as_str().rsplit_once('/').map(|(folder, _)| folder.to_owned());
    let text = blocking(move || read_text(&root, &path)).await?;
    let mut file = parse(&text).map_err(|why| ApiError::invalid(format!("{shown}: {why}")))?;
    let mut address = plain_address(raw)?;
    // A write that cannot be signed sends no images.
    drop(publish.signing_key().await?);
    let images = upload_images(publish, &mut file, folder.as_deref(), &shown).await?;
    let name = match file.metadata.iter().find(|(key, _)| key == "name") {
        Some((_, Ipld::String(name))) => name.clone(),
        _ => title_from_path(&shown),
    };
    if address.path.is_empty() {
        address.path = vec![slug(&name)];
    }
    let mut attributes: Vec<(Vec<String>, Ipld)> =
        file.metadata.into_iter().filter(|(key, _)| key != "name").map(|(key, value)| (vec![key], value)).collect();
    attributes.push((vec!["name".to_owned()], Ipld::String(name)));
    let blocks = markdown::blocks(&file.body)?;
    let built = document::build(publish, &address, Some(blocks), attributes, Mode::Either).await?;
    let id = address.canonical();
    let output = Output {
        action: if built.updated { "update" } else { "document" },
        id: Some(id.clone()),
        version: Some(built.version),
        memory_path: Some(shown.clone()),
        images: (!images.is_empty()).then_some(images),
        ..Output::default()
    };
    let summary =
        if built.updated { format!("Updated {id} from {shown}.") } else { format!("Published {shown} as {id}.") };
    publish.finish(&id, built.blobs, output, summary).await
}

/// The file as text: 400 when it is larger than 256 KiB or not UTF-8.
fn read_text(root: &std::path::Path, path: &MemoryPath) -> ApiResult<String> {
    let (file, opened) = store::open_file(root, path)?;
    let too_large =
        || ApiError::invalid(format!("Memory file {} is larger than 256 KiB and cannot be published", path.as_str()));
    if opened.len() > MAX_CONTENT as u64 {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONTENT as u64 + 1).read_to_end(&mut bytes).map_err(ApiError::internal)?;
    if bytes.len() > MAX_CONTENT {
        return Err(too_large());
    }
    store::decode_text(&bytes).map(str::to_owned).ok_or_else(|| {
        ApiError::invalid(format!(
            "Memory file {} is not UTF-8 text; only markdown files can be published as documents",
            path.as_str()
        ))
    })
}

/// A markdown file: its frontmatter pairs in order (`title` renamed `name` when there is no
/// `name`) and the body after it.
#[derive(Debug, PartialEq)]
struct File {
    metadata: Vec<(String, Ipld)>,
    body: String,
}

/// Publishes the memory images `file` names (see the module docs) and links their `ipfs://` URLs
/// in their place; the published ones by memory path. Every image is found before any is sent.
async fn upload_images(
    publish: &Publish<'_, '_>,
    file: &mut File,
    folder: Option<&str>,
    shown: &str,
) -> ApiResult<std::collections::BTreeMap<String, String>> {
    let refused = |why: String| ApiError::invalid(format!("{shown}: {why}"));
    let mut wanted: Vec<(String, MemoryPath)> = Vec::new();
    let mut note = |target: &str| -> ApiResult<()> {
        if !wanted.iter().any(|(seen, _)| seen == target) {
            let path = image_path(target, folder).map_err(refused)?;
            wanted.push((target.to_owned(), path));
        }
        Ok(())
    };
    for (key, value) in &file.metadata {
        if let (true, Ipld::String(value)) = (IMAGE_KEYS.contains(&key.as_str()), value)
            && is_local(value)
        {
            note(value.trim())?;
        }
    }
    let found = markdown::images(&file.body);
    for image in &found {
        if is_local(image.target) {
            note(image.target)?;
        }
    }
    let root = publish.context.memory_root.clone();
    let paths: Vec<MemoryPath> = wanted.iter().map(|(_, path)| path.clone()).collect();
    blocking(move || {
        paths
            .iter()
            .try_for_each(|path| store::open_file(&root, path).map(drop))
            .map_err(|error| ApiError::new(error.kind(), format!("an image of the document: {}", error.message())))
    })
    .await
    .map_err(|error| ApiError::new(error.kind(), format!("{shown}: {}", error.message())))?;
    // Each file once, however many links name it.
    let mut urls: Vec<(String, String)> = Vec::new();
    let mut published = std::collections::BTreeMap::new();
    for (target, path) in wanted {
        let shown = format!("~/memory/{}", path.as_str());
        let url = match published.get(&shown) {
            Some(url) => String::clone(url),
            None => {
                let root = publish.context.memory_root.clone();
                let done = if publish.dry_run {
                    crate::memory::ipfs::root_of(root, path).await?
                } else {
                    crate::memory::ipfs::publish(&publish.hm, root, path).await?
                };
                let url = format!("ipfs://{}", done.cid);
                published.insert(shown, url.clone());
                url
            }
        };
        urls.push((target, url));
    }
    let url_of = |target: &str| urls.iter().find(|(seen, _)| seen == target.trim()).map(|(_, url)| url.clone());
    for (key, value) in &mut file.metadata {
        if let (true, Ipld::String(text)) = (IMAGE_KEYS.contains(&key.as_str()), &*value)
            && let Some(url) = url_of(text)
        {
            *value = Ipld::String(url);
        }
    }
    let mut body = String::with_capacity(file.body.len());
    let mut copied = 0;
    for image in &found {
        if image.span.start < copied {
            continue;
        }
        if let Some(url) = url_of(image.target) {
            body.push_str(&file.body[copied..image.span.start]);
            body.push_str(&url);
            copied = image.span.end;
        }
    }
    body.push_str(&file.body[copied..]);
    file.body = body;
    Ok(published)
}

/// The memory file an image link names: `~/memory/<path>`, else a path relative to `folder` (the
/// markdown file's), `..` allowed within memory. A `file://` URL is refused.
fn image_path(target: &str, folder: Option<&str>) -> Result<MemoryPath, String> {
    if target.starts_with("file:") {
        return Err(format!(
            "the image {target} is a file:// URL; name the memory file instead (a path relative to this file, or \
             ~/memory/<path>)"
        ));
    }
    let (base, rest) = match target.strip_prefix("~/memory/") {
        Some(rest) => (None, rest),
        None => (folder, target),
    };
    let mut segments: Vec<&str> = base.map(|base| base.split('/').collect()).unwrap_or_default();
    for segment in rest.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop().ok_or_else(|| format!("the image {target} is outside memory"))?;
            }
            segment => segments.push(segment),
        }
    }
    MemoryPath::parse(&segments.join("/")).map_err(|error| format!("the image {target}: {}", error.message()))
}

/// Splits and reads the frontmatter; the error says what is wrong.
fn parse(text: &str) -> Result<File, String> {
    let (mut metadata, body) = match text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) {
        None => (Vec::new(), text),
        Some(rest) => {
            let mut offset = 0;
            let mut block = None;
            for line in rest.split_inclusive('\n') {
                if line.trim_end() == "---" {
                    block = Some((&rest[..offset], &rest[offset + line.len()..]));
                    break;
                }
                offset += line.len();
            }
            let (block, body) = block.ok_or("the frontmatter opened with --- is never closed")?;
            (frontmatter(block)?, body)
        }
    };
    if !metadata.iter().any(|(key, _)| key == "name")
        && let Some(title) = metadata.iter_mut().find(|(key, _)| key == "title")
    {
        title.0 = "name".to_owned();
    }
    Ok(File { metadata, body: body.to_owned() })
}

/// `key: value` lines.
fn frontmatter(block: &str) -> Result<Vec<(String, Ipld)>, String> {
    let mut pairs: Vec<(String, Ipld)> = Vec::new();
    for (number, line) in block.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let unsupported = || {
            format!(
                "frontmatter line {} ({trimmed}) is not a key: value pair; only one-line text, number and \
                 true/false values are supported",
                number + 2
            )
        };
        let (key, value) = trimmed.split_once(':').ok_or_else(unsupported)?;
        let key = key.trim();
        let value = value.trim();
        let plain_key = !key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            && !line.starts_with([' ', '\t']);
        let structured = value.starts_with(['[', '{', '|', '>', '&', '*'])
            || (value.starts_with('-') && value.parse::<i64>().is_err());
        if !plain_key || value.is_empty() || structured {
            return Err(unsupported());
        }
        let value = if let Some(quoted) = unquote(value) {
            Ipld::String(quoted.to_owned())
        } else if value == "true" || value == "false" {
            Ipld::Bool(value == "true")
        } else if let Ok(number) = value.parse::<i64>() {
            Ipld::Integer(number.into())
        } else {
            Ipld::String(value.to_owned())
        };
        if pairs.iter().any(|(seen, _)| seen == key) {
            return Err(format!("frontmatter key {key} is given twice"));
        }
        pairs.push((key.to_owned(), value));
    }
    Ok(pairs)
}

/// The text inside one pair of matching quotes.
fn unquote(value: &str) -> Option<&str> {
    ['"', '\''].into_iter().find_map(|quote| value.strip_prefix(quote)?.strip_suffix(quote))
}

/// Whether a link names a file rather than a URL: a relative reference (not a `#fragment`), or
/// a `file://` URL.
fn is_local(target: &str) -> bool {
    let target = target.trim();
    match url::Url::parse(target) {
        Ok(url) => url.scheme() == "file",
        Err(url::ParseError::RelativeUrlWithoutBase) => !target.starts_with('#'),
        Err(_) => false,
    }
}

/// A name from a memory path: the file name without its extension, `-`/`_` as spaces, the
/// first letter capitalised (`notes/weekly-update.md` → `Weekly update`).
fn title_from_path(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = match base.rsplit_once('.') {
        Some((stem, extension)) if !stem.is_empty() && extension.chars().all(|c| c.is_ascii_alphanumeric()) => stem,
        _ => base,
    };
    let words = stem.replace(['-', '_'], " ");
    let words = words.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Untitled".to_owned(),
    }
}

/// A path segment from a name: lowercase ASCII letters and digits, other runs as one `-`.
fn slug(name: &str) -> String {
    let mut slug = String::new();
    for c in name.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() { "untitled".to_owned() } else { slug.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_becomes_metadata_with_title_standing_for_name() {
        let file = parse(
            "---\ntitle: \"Weekly update\"\nsummary: What changed: a lot\ndraft: false\nrank: -3\n# a comment\n\n---\n# Heading\nBody\n",
        )
        .unwrap();
        assert_eq!(
            file.metadata,
            [
                ("name".to_owned(), Ipld::String("Weekly update".into())),
                ("summary".to_owned(), Ipld::String("What changed: a lot".into())),
                ("draft".to_owned(), Ipld::Bool(false)),
                ("rank".to_owned(), Ipld::Integer(-3)),
            ]
        );
        assert_eq!(file.body, "# Heading\nBody\n");
        // With a name, title stays a field of its own.
        let both = parse("---\nname: A\ntitle: B\n---\n").unwrap();
        assert_eq!(both.metadata[1], ("title".to_owned(), Ipld::String("B".into())));
        // No frontmatter: all body.
        assert_eq!(
            parse("Just text\n---\n").unwrap(),
            File { metadata: Vec::new(), body: "Just text\n---\n".to_owned() }
        );
    }

    #[test]
    fn yaml_this_reader_cannot_read_is_refused_with_its_line() {
        for (text, says) in [
            ("---\nname: A\n", "never closed"),
            ("---\ntags:\n  - a\n---\n", "line 2 (tags:)"),
            ("---\ntags: [a, b]\n---\n", "line 2 (tags: [a, b])"),
            ("---\nsummary: |\n  long\n---\n", "line 2"),
            ("---\nname: A\nname: B\n---\n", "given twice"),
            ("---\njust words\n---\n", "line 2 (just words)"),
            ("---\nlist: - a\n---\n", "line 2 (list: - a)"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn image_links_name_memory_files_relative_to_the_markdown_file() {
        let path = |target: &str, folder: Option<&str>| image_path(target, folder).map(|path| path.as_str().to_owned());
        assert_eq!(path("chart.png", Some("notes")).unwrap(), "notes/chart.png");
        assert_eq!(path("./pics/a.png", Some("notes/2026")).unwrap(), "notes/2026/pics/a.png");
        assert_eq!(path("../pics/a.png", Some("notes")).unwrap(), "pics/a.png");
        assert_eq!(path("~/memory/pics/a.png", Some("notes")).unwrap(), "pics/a.png");
        assert_eq!(path("a.png", None).unwrap(), "a.png");
        assert!(path("../../a.png", Some("notes")).unwrap_err().contains("outside memory"));
        assert!(path("../a.png", None).unwrap_err().contains("outside memory"));
        assert!(path("file:///etc/passwd", Some("notes")).unwrap_err().contains("file:// URL"));
        assert!(is_local("pics/me.png") && is_local("file:///etc/passwd"));
        assert!(!is_local("ipfs://bafy") && !is_local("https://x.test/b.png") && !is_local("#top"));
    }

    #[test]
    fn names_and_paths_come_from_the_file_when_not_given() {
        assert_eq!(title_from_path("~/memory/notes/weekly-update.md"), "Weekly update");
        assert_eq!(title_from_path("~/memory/snake_case_notes"), "Snake case notes");
        assert_eq!(slug("Weekly update: Q3 (draft)"), "weekly-update-q3-draft");
        assert_eq!(slug("¿Qué?"), "qu");
        assert_eq!(slug("!!!"), "untitled");
        assert_eq!(crate::verbs::memory_file_option("~/memory/notes/a.md").unwrap().as_str(), "notes/a.md");
        assert_eq!(crate::verbs::memory_file_option("notes/a.md").unwrap().as_str(), "notes/a.md");
        let home = super::super::HmAddress::parse("hm://z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK/").unwrap();
        assert!(home.path.is_empty(), "the home address gets a path from the name");
    }
}
