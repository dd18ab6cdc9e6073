//! The callables: service tools an agent reaches through the `call` verb (docs/runtime.md §4.4),
//! each with its description and JSON Schema contract, and the grants that decide which of them
//! an agent may run.
//!
//! This server has five: `search` (the configured Hypermedia server's Search API), `query` (its
//! `Query` API: a document's children or descendants), `attributes` (a document's metadata
//! without its body, through `Resource`), `web_search` (a self-hosted SearXNG, only when
//! `--searxng-url` is set), and `execute` (python or shell code in the code sandbox with the
//! agent's memory as its workspace, docs/sandbox.md; granted only when the sandbox's probe
//! succeeded). Lambda tools run for agents granted `execute` (`tools::lambda`). The descriptions
//! are ours.

use std::sync::{Arc, LazyLock};

use seed_agents_protocol::generated::AgentDefinition;
use serde_json::{Value as Json, json};

use crate::model::ToolSpec;

/// A service callable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Callable {
    /// `search`: Seed Hypermedia content through the HM server's Search API.
    Search,
    /// `query`: the documents under a path of a Hypermedia space, through the HM `Query` API.
    Query,
    /// `attributes`: a Hypermedia document's metadata without its body.
    Attributes,
    /// `web_search`: the public web through SearXNG.
    WebSearch,
    /// `execute`: code in the sandbox, with the agent's memory as `/workspace`.
    Execute,
}

/// Names no lambda may take: the verbs and every callable upstream knows, runnable here or not.
pub(crate) const RESERVED_NAMES: &[&str] = &[
    "read",
    "write",
    "call",
    "delegate",
    "plan",
    "status",
    "return_result",
    "continue_session",
    "search",
    "query",
    "attributes",
    "web_search",
    "execute",
    "navigate",
];

impl Callable {
    /// Every callable, in listing order.
    pub(crate) const ALL: [Callable; 5] =
        [Callable::Search, Callable::Query, Callable::Attributes, Callable::WebSearch, Callable::Execute];

    /// The callable called `name` (legacy names normalised first).
    pub(crate) fn named(name: &str) -> Option<Callable> {
        let name = normalise(name);
        Self::ALL.into_iter().find(|callable| callable.name() == name)
    }

    /// Its name on the wire.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Callable::Search => "search",
            Callable::Query => "query",
            Callable::Attributes => "attributes",
            Callable::WebSearch => "web_search",
            Callable::Execute => "execute",
        }
    }

    /// The model-facing description.
    pub(crate) fn description(self) -> &'static str {
        match self {
            Callable::Search => {
                "Search published Seed Hypermedia content by title and contact name, and optionally by document \
                 body and comment text. Each result has an hm:// URL you can pass to read. searchType picks \
                 keyword, semantic or hybrid ranking (hybrid by default); accountUid limits the search to one \
                 account; pageSize caps the results (1-50)."
            }
            Callable::Query => {
                "List the documents under a path of a Seed Hypermedia space, with their titles and update times. \
                 space is an account id or an hm:// URL (its path is used when path is absent); mode Children \
                 lists one level (the default), AllDescendants the whole subtree; sort orders by a term, newest or \
                 last first with reverse; limit caps the results (1-100, 50 by default)."
            }
            Callable::Attributes => {
                "Get a Seed Hypermedia document's attributes (its metadata: name, summary, cover, layout and the \
                 rest) and version, without its body. url is the document's hm:// URL, optionally with ?v= for a \
                 version."
            }
            Callable::WebSearch => {
                "Search the public web and get ranked results with title, URL and a snippet each. Read a result \
                 by passing its URL to read. Pick the news category for recent events, and timeRange to keep \
                 results recent; count caps the results (default 10, at most 25)."
            }
            Callable::Execute => {
                "Run python or shell code in a fresh sandbox and get its exit code, stdout and stderr. Your \
                 memory is the working directory (/workspace), so the code reads and writes the same files \
                 read and write see; files it changes are listed. The sandbox has no network. timeout_secs \
                 bounds the run (60 by default, 1-300); each output stream is cut at 64 KiB."
            }
        }
    }

    /// One line for listings: the description's first sentence, at most 140 characters.
    pub(crate) fn summary(self) -> String {
        first_sentence(self.description())
    }

    /// Its input schema.
    pub(crate) fn input_schema(self) -> &'static Json {
        &INPUTS[self as usize]
    }

    /// Its output schema, when it documents one.
    pub(crate) fn output_schema(self) -> Option<&'static Json> {
        OUTPUTS[self as usize].as_ref()
    }

    /// The provider-facing spec when the callable is promoted to a tool of its own.
    pub(crate) fn spec(self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: INPUTS[self as usize].clone(),
        }
    }
}

/// Legacy callable names, as the current ones.
pub(crate) fn normalise(name: &str) -> &str {
    match name {
        "execute_code" => "execute",
        other => other,
    }
}

/// A description's first sentence (up to the first `. `), cut to 137 characters and `…` when
/// longer than 140.
pub(crate) fn first_sentence(text: &str) -> String {
    let sentence = match text.find(". ") {
        Some(at) => &text[..=at],
        None => text,
    };
    if sentence.chars().count() > 140 {
        let mut cut: String = sentence.chars().take(137).collect();
        cut.push('…');
        cut
    } else {
        sentence.to_owned()
    }
}

/// Which callables that need a backend have one on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Backends {
    /// `web_search`: a SearXNG URL is configured.
    pub(crate) web_search: bool,
    /// `execute`: the code sandbox's probe succeeded.
    pub(crate) execute: bool,
}

impl Backends {
    /// Whether `callable` can run here.
    fn runs(self, callable: Callable) -> bool {
        match callable {
            Callable::WebSearch => self.web_search,
            Callable::Execute => self.execute,
            _ => true,
        }
    }
}

/// The callables an agent may run here: those this server can run (`web_search` needs a SearXNG
/// URL, `execute` the sandbox) that the definition's `tools` names (normalised), or all of them
/// when it names none.
pub(crate) fn granted(backends: Backends, definition: &AgentDefinition) -> Vec<Callable> {
    Callable::ALL
        .into_iter()
        .filter(|callable| backends.runs(*callable))
        .filter(|callable| match &definition.tools {
            None => true,
            Some(tools) => tools.iter().any(|name| normalise(name.trim()) == callable.name()),
        })
        .collect()
}

/// Narrows the definition's grants to the names in `wanted` (for a delegated child's or a
/// trigger thread's `tools`): its grants are every callable when it names none, and a name it was
/// not granted grants nothing.
pub(crate) fn narrow(definition: &mut AgentDefinition, wanted: &[String]) {
    let base: Vec<String> = match &definition.tools {
        Some(tools) => tools.clone(),
        None => Callable::ALL.iter().map(|tool| tool.name().to_owned()).collect(),
    };
    definition.tools = Some(base.into_iter().filter(|tool| wanted.contains(tool)).collect());
}

static INPUTS: LazyLock<[Arc<Json>; 5]> = LazyLock::new(|| {
    [
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to look for; phrases and wildcards work."},
                "accountUid": {"type": "string", "description": "Only search this account's content."},
                "includeBody": {"type": "boolean", "description": "Also search document bodies and comments (titles and contacts only by default)."},
                "contextSize": {"type": "integer", "minimum": 0, "maximum": 512, "description": "Characters of context around each match; 48 by default."},
                "searchType": {"type": "string", "enum": ["keyword", "semantic", "hybrid"], "description": "How results are ranked; hybrid by default."},
                "pageSize": {"type": "integer", "minimum": 1, "description": "At most this many results (up to 50)."}
            },
            "required": ["query"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "space": {"type": "string", "minLength": 1, "description": "An account id (z6Mk…) or an hm:// URL."},
                "path": {"type": "string", "description": "The path under the space, such as /notes; the space's root by default."},
                "mode": {"type": "string", "enum": ["Children", "AllDescendants"], "description": "One level (the default) or the whole subtree."},
                "sort": {"type": "string", "enum": ["Path", "Title", "CreateTime", "UpdateTime", "DisplayTime", "ActivityTime"], "description": "What the results are ordered by."},
                "reverse": {"type": "boolean", "description": "Reverse the order."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "At most this many results; 50 by default."}
            },
            "required": ["space"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "url": {"type": "string", "minLength": 1, "description": "The document's hm:// URL."}
            },
            "required": ["url"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to search the web for."},
                "count": {"type": "integer", "minimum": 1, "description": "At most this many results: 10 by default, 25 at most."},
                "category": {"type": "string", "enum": ["general", "news"], "description": "news for recent events, general otherwise (the default)."},
                "timeRange": {"type": "string", "enum": ["day", "week", "month", "year"], "description": "Only results from this recent period."},
                "language": {"type": "string", "description": "A language code such as en (the default)."}
            },
            "required": ["query"]
        }),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "runtime": {"type": "string", "enum": ["python", "shell"], "description": "python runs the code with python3; shell with /bin/sh."},
                "code": {"type": "string", "minLength": 1, "description": "The program."},
                "timeout_secs": {"type": "number", "description": "Seconds before the run is stopped: 60 by default, clamped to 1-300."}
            },
            "required": ["runtime", "code"]
        }),
    ]
    .map(Arc::new)
});

static OUTPUTS: LazyLock<[Option<Json>; 5]> = LazyLock::new(|| {
    [
        None,
        None,
        None,
        Some(json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string", "description": "What the search found, in one line."},
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "title": {"type": "string"},
                            "url": {"type": "string"},
                            "snippet": {"type": "string"},
                            "engine": {"type": "string", "description": "The search engine that found it."}
                        }
                    }
                },
                "partial": {"type": "boolean", "description": "Some engines did not answer, so results may be missing."},
                "markdown": {"type": "string", "description": "The results as a readable list."}
            }
        })),
        Some(json!({
            "type": "object",
            "properties": {
                "summary": {"type": "string", "description": "How the run ended, in one line."},
                "exitCode": {"type": "integer", "description": "The program's exit code; -1 when it was stopped at its timeout."},
                "success": {"type": "boolean", "description": "Whether it exited 0."},
                "stdout": {"type": "string", "description": "Its standard output (the first 64 KiB)."},
                "stderr": {"type": "string", "description": "Its standard error (the first 64 KiB)."},
                "truncated": {"type": "boolean", "description": "stdout or stderr was cut at 64 KiB."},
                "durationMs": {"type": "integer"},
                "timedOut": {"type": "boolean", "description": "It was stopped at its timeout."},
                "changedFiles": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": "The memory file's path."},
                            "change": {"type": "string", "enum": ["added", "modified", "removed"]}
                        }
                    }
                }
            }
        })),
    ]
});

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(tools: Option<&[&str]>) -> AgentDefinition {
        let mut definition: AgentDefinition = seed_agents_protocol::wire::from_ipld(ipld_core::ipld::Ipld::Map(
            [
                ("name".to_owned(), ipld_core::ipld::Ipld::String("a".into())),
                ("model".to_owned(), ipld_core::ipld::Ipld::String("m".into())),
                ("modelProvider".to_owned(), ipld_core::ipld::Ipld::String("p".into())),
                ("systemPrompt".to_owned(), ipld_core::ipld::Ipld::String("s".into())),
            ]
            .into(),
        ))
        .unwrap();
        definition.tools = tools.map(|names| names.iter().map(|name| (*name).to_owned()).collect());
        definition
    }

    #[test]
    fn grants_need_a_backend_and_follow_the_definition() {
        let none = Backends::default();
        assert_eq!(
            granted(none, &definition(None)),
            [Callable::Search, Callable::Query, Callable::Attributes],
            "no SearXNG, no web_search; no sandbox, no execute"
        );
        let all = Backends { web_search: true, execute: true };
        assert_eq!(granted(all, &definition(None)), Callable::ALL);
        assert_eq!(granted(all, &definition(Some(&["query", "attributes"]))), [Callable::Query, Callable::Attributes]);
        assert_eq!(granted(all, &definition(Some(&["web_search", "publish"]))), [Callable::WebSearch]);
        assert_eq!(granted(all, &definition(Some(&[]))), []);
        assert_eq!(granted(all, &definition(Some(&["execute_code"]))), [Callable::Execute], "the legacy name");
        assert_eq!(granted(none, &definition(Some(&["execute"]))), [], "never without the sandbox");
    }

    #[test]
    fn names_schemas_and_summaries() {
        for callable in Callable::ALL {
            assert_eq!(Callable::named(callable.name()), Some(callable));
            assert!(RESERVED_NAMES.contains(&callable.name()));
            assert_eq!(callable.input_schema()["type"], "object");
            assert!(jsonschema::validator_for(callable.input_schema()).is_ok());
            assert!(callable.summary().ends_with('.') && callable.summary().len() <= 140, "{}", callable.summary());
        }
        assert_eq!(Callable::named("execute_code"), Some(Callable::Execute));
        assert_eq!(normalise("execute_code"), "execute");
        assert_eq!(first_sentence("One. Two."), "One.");
        let long = format!("{}. Next.", "x".repeat(200));
        assert_eq!(first_sentence(&long).chars().count(), 138);
        assert!(first_sentence(&long).ends_with('…'));
    }
}
