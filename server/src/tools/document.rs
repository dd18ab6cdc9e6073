//! Tool documents (docs/runtime.md §4.6): a tool's contract as a content-addressed document.
//!
//! A document is `{name, kind, summary, description, input, output?, source?, runtime?,
//! binding?}`; its CID is CIDv1, codec dag-cbor, sha2-256 over its canonical DAG-CBOR encoding
//! (absent fields omitted), written `bafyrei…`. Builtin documents are built from the
//! [`registry`]; lambda documents from what a writer or the agent authored,
//! after the checks upstream applies.

use std::collections::BTreeMap;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::{Value, wire};
use serde_json::Value as Json;

use super::registry::{self, Callable, RESERVED_NAMES};
use super::schema;
use crate::error::{ApiError, ApiResult};
use crate::hm::blob;

/// The largest lambda source, in bytes.
pub(crate) const MAX_SOURCE_BYTES: usize = 256 * 1024;
/// The largest description, in bytes.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// The longest authored summary, in characters.
pub(crate) const MAX_SUMMARY_CHARS: usize = 140;

/// What a document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A service callable's contract, bound to its executor.
    Builtin,
    /// Authored source meant for a code sandbox.
    Lambda,
    /// A tool of one of the owner's MCP servers, projected for an agent granted the server.
    Mcp,
}

impl Kind {
    /// The wire string.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Builtin => "builtin",
            Kind::Lambda => "lambda",
            Kind::Mcp => "mcp",
        }
    }
}

/// A lambda's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    /// TypeScript (the default).
    Typescript,
    /// Python.
    Python,
}

impl Runtime {
    /// The wire string.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Runtime::Typescript => "typescript",
            Runtime::Python => "python",
        }
    }
}

/// One tool document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolDocument {
    /// The tool's name.
    pub name: String,
    /// Builtin or lambda.
    pub kind: Kind,
    /// One line for listings.
    pub summary: String,
    /// The model-facing instructions.
    pub description: String,
    /// The input contract (a JSON Schema object).
    pub input: Json,
    /// The output contract, when documented.
    pub output: Option<Json>,
    /// A lambda's source.
    pub source: Option<String>,
    /// A lambda's language.
    pub runtime: Option<Runtime>,
    /// A builtin's executor.
    pub binding: Option<String>,
    /// An MCP tool's server (the owner's server name).
    pub server: Option<String>,
    /// An MCP tool's name on its server.
    pub remote_name: Option<String>,
}

/// What an MCP server says about one of its tools, for [`ToolDocument::mcp`].
#[derive(Debug, Clone)]
pub(crate) struct McpInput<'a> {
    /// The projected name (see `mcp::project::tool_name`).
    pub name: String,
    /// The server's name.
    pub server: &'a str,
    /// The tool's name on the server.
    pub remote_name: &'a str,
    /// The server's description of it.
    pub description: Option<&'a str>,
    /// Its input schema as the server gave it.
    pub input: Json,
}

/// What an author gives for a lambda (from `SaveAgentTool` or `write ~/tools/<name>`).
#[derive(Debug, Clone, Default)]
pub(crate) struct LambdaInput {
    pub name: String,
    pub description: Option<String>,
    pub summary: Option<String>,
    /// Absent: `{type: "object"}`.
    pub input: Option<Json>,
    pub output: Option<Json>,
    pub source: Option<String>,
    /// Anything but `python` is TypeScript.
    pub runtime: Option<String>,
}

impl ToolDocument {
    /// The builtin document of `callable`.
    pub(crate) fn builtin(callable: Callable) -> Self {
        Self {
            name: callable.name().to_owned(),
            kind: Kind::Builtin,
            summary: callable.summary(),
            description: callable.description().to_owned(),
            input: callable.input_schema().clone(),
            output: callable.output_schema().cloned(),
            source: None,
            runtime: None,
            binding: Some(callable.name().to_owned()),
            server: None,
            remote_name: None,
        }
    }

    /// The document of an MCP server's tool. Its description is the server's (cut to
    /// [`MAX_DESCRIPTION_BYTES`]), or a line naming the tool; its input schema the server's without
    /// `$schema`, always an object schema (model providers refuse anything else).
    pub(crate) fn mcp(raw: McpInput<'_>) -> Self {
        let fallback = format!("Tool {} of the MCP server {}.", raw.remote_name, raw.server);
        let description = match raw.description.map(str::trim).filter(|text| !text.is_empty()) {
            Some(text) => cut(text, MAX_DESCRIPTION_BYTES).to_owned(),
            None => fallback,
        };
        let input = match raw.input {
            Json::Object(mut schema) => {
                schema.remove("$schema");
                schema.insert("type".to_owned(), Json::String("object".to_owned()));
                Json::Object(schema)
            }
            _ => serde_json::json!({"type": "object"}),
        };
        Self {
            name: raw.name,
            kind: Kind::Mcp,
            summary: registry::first_sentence(&description),
            description,
            input,
            output: None,
            source: None,
            runtime: None,
            binding: None,
            server: Some(raw.server.to_owned()),
            remote_name: Some(raw.remote_name.to_owned()),
        }
    }

    /// A checked lambda document (400 with the reason otherwise).
    pub(crate) fn lambda(raw: LambdaInput) -> ApiResult<Self> {
        check_name(&raw.name)?;
        let description = raw.description.as_deref().map(str::trim).unwrap_or_default();
        if description.is_empty() {
            return Err(ApiError::invalid("Tool document requires a description"));
        }
        if description.len() > MAX_DESCRIPTION_BYTES {
            return Err(ApiError::invalid("Tool description is too large"));
        }
        let source = raw.source.unwrap_or_default();
        if source.trim().is_empty() {
            return Err(ApiError::invalid("Lambda tool document requires source code"));
        }
        if source.len() > MAX_SOURCE_BYTES {
            return Err(ApiError::invalid("Lambda source is too large"));
        }
        let input = raw.input.unwrap_or_else(|| serde_json::json!({"type": "object"}));
        for (label, schema) in [("input", Some(&input)), ("output", raw.output.as_ref())] {
            let Some(schema) = schema else { continue };
            let errors = schema::shape_errors(schema);
            if !errors.is_empty() {
                return Err(ApiError::invalid(format!("Tool {label} schema is not supported: {}", errors.join("; "))));
            }
        }
        let summary = match raw.summary.as_deref().map(str::trim).filter(|summary| !summary.is_empty()) {
            Some(summary) => summary.chars().take(MAX_SUMMARY_CHARS).collect(),
            None => registry::first_sentence(description),
        };
        Ok(Self {
            name: raw.name,
            kind: Kind::Lambda,
            summary,
            description: description.to_owned(),
            input,
            output: raw.output,
            source: Some(source),
            runtime: Some(if raw.runtime.as_deref() == Some("python") { Runtime::Python } else { Runtime::Typescript }),
            binding: None,
            server: None,
            remote_name: None,
        })
    }

    /// The document as an IPLD map (absent fields omitted).
    pub(crate) fn to_ipld(&self) -> Ipld {
        let text = |value: &str| Ipld::String(value.to_owned());
        let schema = wire::json_to_ipld;
        let mut fields = BTreeMap::from([
            ("name".to_owned(), text(&self.name)),
            ("kind".to_owned(), text(self.kind.as_str())),
            ("summary".to_owned(), text(&self.summary)),
            ("description".to_owned(), text(&self.description)),
            ("input".to_owned(), schema(&self.input)),
        ]);
        if let Some(output) = &self.output {
            fields.insert("output".to_owned(), schema(output));
        }
        if let Some(source) = &self.source {
            fields.insert("source".to_owned(), text(source));
        }
        if let Some(runtime) = self.runtime {
            fields.insert("runtime".to_owned(), text(runtime.as_str()));
        }
        if let Some(binding) = &self.binding {
            fields.insert("binding".to_owned(), text(binding));
        }
        if let Some(server) = &self.server {
            fields.insert("server".to_owned(), text(server));
        }
        if let Some(remote_name) = &self.remote_name {
            fields.insert("remoteName".to_owned(), text(remote_name));
        }
        Ipld::Map(fields)
    }

    /// The canonical DAG-CBOR bytes and their CID string.
    pub(crate) fn encode(&self) -> ApiResult<(String, Vec<u8>)> {
        let bytes = wire::ipld_to_vec(&self.to_ipld()).map_err(ApiError::internal)?;
        let cid = blob::cid_v1_sha256(blob::DAG_CBOR, &bytes).to_string();
        Ok((cid, bytes))
    }

    /// A stored document back from its bytes.
    pub(crate) fn decode(bytes: &[u8]) -> ApiResult<Self> {
        let Ipld::Map(mut fields) = wire::decode_ipld(bytes).map_err(ApiError::internal)? else {
            return Err(ApiError::internal("a stored tool document is not a map"));
        };
        let mut text = |key: &str| match fields.remove(key) {
            Some(Ipld::String(value)) => Some(value),
            _ => None,
        };
        let name = text("name").ok_or_else(|| ApiError::internal("a stored tool document has no name"))?;
        let kind = match text("kind").as_deref() {
            Some("builtin") => Kind::Builtin,
            Some("lambda") => Kind::Lambda,
            Some("mcp") => Kind::Mcp,
            other => return Err(ApiError::internal(format!("a stored tool document has kind {other:?}"))),
        };
        let (summary, description) = (text("summary").unwrap_or_default(), text("description").unwrap_or_default());
        let (source, binding) = (text("source"), text("binding"));
        let (server, remote_name) = (text("server"), text("remoteName"));
        let runtime = match text("runtime").as_deref() {
            Some("python") => Some(Runtime::Python),
            Some(_) => Some(Runtime::Typescript),
            None => None,
        };
        let json = |value: Ipld| serde_json::to_value(Value(value)).map_err(ApiError::internal);
        let input = json(fields.remove("input").unwrap_or(Ipld::Map(BTreeMap::new())))?;
        let output = fields.remove("output").map(json).transpose()?;
        Ok(Self { name, kind, summary, description, input, output, source, runtime, binding, server, remote_name })
    }

    /// The contract as markdown: name, kind and version (CID), description, input and output
    /// schemas, and a lambda's source.
    pub(crate) fn contract_markdown(&self, cid: &str) -> String {
        let runtime = match (&self.server, &self.remote_name) {
            (Some(server), Some(remote)) => format!(" · MCP server `{server}`, tool `{remote}`"),
            _ => self.runtime.map(|runtime| format!(" · {}", runtime.as_str())).unwrap_or_default(),
        };
        let mut parts = vec![
            format!("# {}", self.name),
            String::new(),
            format!("> {} tool · version `{cid}`{runtime}", self.kind.as_str()),
            String::new(),
            self.description.clone(),
            String::new(),
            schema_section("Input schema", &self.input),
        ];
        if let Some(output) = &self.output {
            parts.extend([String::new(), schema_section("Output schema", output)]);
        }
        if let Some(source) = &self.source {
            let fence = if self.runtime == Some(Runtime::Python) { "python" } else { "ts" };
            parts.extend([String::new(), format!("## Source\n```{fence}\n{source}\n```")]);
            parts.extend([String::new(), format!("> {}", super::LAMBDA_RUNTIMES)]);
        }
        parts.join("\n")
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `## <title>` and the schema as pretty JSON in a fence.
pub(crate) fn schema_section(title: &str, schema: &Json) -> String {
    let pretty = serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string());
    format!("## {title}\n```json\n{pretty}\n```")
}

/// A lambda's name: 2–64 of `[a-z0-9_-]`, starting with a letter, and not a verb's or a builtin
/// callable's.
pub(crate) fn check_name(name: &str) -> ApiResult<()> {
    let mut bytes = name.bytes();
    let fits = (2..=64).contains(&name.len())
        && bytes.next().is_some_and(|first| first.is_ascii_lowercase())
        && bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-');
    if !fits {
        return Err(ApiError::invalid("Tool name must be lowercase [a-z0-9_-], start with a letter, 2-64 chars"));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(ApiError::invalid(format!("\"{name}\" is a builtin tool or verb and cannot be replaced")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn word_count() -> LambdaInput {
        LambdaInput {
            name: "word_count".into(),
            description: Some("Counts words. Splits on whitespace.".into()),
            input: Some(json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})),
            source: Some("export default (input) => ({count: input.text.split(/\\s+/).length})".into()),
            ..LambdaInput::default()
        }
    }

    #[test]
    fn builtin_documents_have_stable_dag_cbor_cids() {
        let document = ToolDocument::builtin(Callable::Search);
        let (cid, bytes) = document.encode().unwrap();
        assert!(cid.starts_with("bafyrei"), "{cid}");
        assert_eq!(document.encode().unwrap().0, cid, "the same document, the same CID");
        assert_eq!(wire::ipld_to_vec(&wire::decode_ipld(&bytes).unwrap()).unwrap(), bytes, "canonical bytes");
        assert_eq!(ToolDocument::decode(&bytes).unwrap(), document);
        assert_ne!(ToolDocument::builtin(Callable::WebSearch).encode().unwrap().0, cid);
        assert_eq!(document.binding.as_deref(), Some("search"));
    }

    #[test]
    fn lambdas_are_checked_and_summarised() {
        let document = ToolDocument::lambda(word_count()).unwrap();
        assert_eq!(document.summary, "Counts words.");
        assert_eq!(document.runtime, Some(Runtime::Typescript));
        let (cid, bytes) = document.encode().unwrap();
        assert_eq!(ToolDocument::decode(&bytes).unwrap(), document);
        let python = ToolDocument::lambda(LambdaInput { runtime: Some("python".into()), ..word_count() }).unwrap();
        assert_ne!(python.encode().unwrap().0, cid, "any change is a new version");
        let markdown = document.contract_markdown(&cid);
        assert!(markdown.starts_with(&format!("# word_count\n\n> lambda tool · version `{cid}` · typescript")));
        assert!(markdown.contains("## Source\n```ts\n"), "{markdown}");

        let refused = |raw: LambdaInput| ToolDocument::lambda(raw).unwrap_err().message().to_owned();
        assert!(refused(LambdaInput { name: "Bad".into(), ..word_count() }).starts_with("Tool name must be"));
        assert!(refused(LambdaInput { name: "x".into(), ..word_count() }).starts_with("Tool name must be"));
        assert_eq!(
            refused(LambdaInput { name: "search".into(), ..word_count() }),
            "\"search\" is a builtin tool or verb and cannot be replaced"
        );
        assert_eq!(refused(LambdaInput { description: None, ..word_count() }), "Tool document requires a description");
        assert_eq!(
            refused(LambdaInput { source: Some(" ".into()), ..word_count() }),
            "Lambda tool document requires source code"
        );
        let bad_schema = refused(LambdaInput { input: Some(json!({"type": "object", "oneOf": []})), ..word_count() });
        assert!(bad_schema.starts_with("Tool input schema is not supported: "), "{bad_schema}");
        let default = ToolDocument::lambda(LambdaInput { input: None, ..word_count() }).unwrap();
        assert_eq!(default.input, json!({"type": "object"}));
    }
}
