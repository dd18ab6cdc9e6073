//! `~/tools` (read and write) and the `call` verb (docs/runtime.md §4.2–§4.4, §4.6).
//!
//! `read ~/tools` lists the verbs and what the agent can call; `read ~/tools/<verb>` gives a
//! verb's contract and `read ~/tools/<doc>` a tool document's, with its CID. `write
//! ~/tools/<name>` saves a lambda (overwriting silently, as upstream's agent-side write does) or
//! deletes one. `call {tool, input}` runs a granted callable after checking `input` against its
//! contract; a miss is a successful result that shows the listing, and input that does not fit
//! is a successful result with the contract and what was wrong, so the caller can correct itself.
//! Lambdas are found and their input checked, then run (`tools::lambda`).

use ipld_core::ipld::Ipld;
use seed_agents_protocol::Value;
use serde::Serialize;
use serde_json::Value as Json;

use super::{Context, Input, record};
use crate::error::{ApiError, ApiResult};
use crate::runtime::tools::Tool;
use crate::tools::document::{self, Kind, LambdaInput, ToolDocument};
use crate::tools::registry::{self, Callable};
use crate::tools::{self as agent_tools, LAMBDA_RUNTIMES, execute, lambda, search, store, web_search};

/// The options `write ~/tools/<name>` understands.
const WRITE_OPTIONS: &[&str] = &["delete", "tool"];

/// What `write ~/tools/<name>` content must be.
const EXPECTS_JSON: &str = "write ~/tools/<name> expects JSON content: {description, input, output?, source, runtime?}";

/// `read ~/tools` (`None`) or `read ~/tools/<name>`.
pub(super) async fn read(context: &Context<'_>, name: Option<&str>) -> ApiResult<Value> {
    let Some(name) = name else { return listing(context, None).await };
    if let Some(verb) = Tool::named(name) {
        #[derive(Serialize)]
        struct Contract<'a> {
            name: &'a str,
            markdown: String,
        }
        return record(format!("Contract for {name}."), &Contract { name, markdown: verb_contract(verb) });
    }
    let granted = agent_tools::granted(context.app, &context.definition);
    let stored = agent_tools::document(context.app, &context.owner_id, &context.agent_id, name).await?;
    let Some(stored) = stored.filter(|stored| {
        stored.document.kind == Kind::Lambda || agent_tools::is_granted(stored, &granted, &context.definition)
    }) else {
        return listing(context, Some(format!("No tool named {name}."))).await;
    };
    #[derive(Serialize)]
    struct Contract<'a> {
        name: &'a str,
        cid: &'a str,
        kind: &'static str,
        markdown: String,
    }
    let markdown = stored.document.contract_markdown(&stored.cid);
    let contract = Contract { name, cid: &stored.cid, kind: stored.document.kind.as_str(), markdown };
    record(format!("Contract for {name} ({}).", stored.cid), &contract)
}

/// `write ~/tools/<name>`: `options.delete: true`, or a lambda from JSON `content` or
/// `options.tool`.
pub(super) async fn write(context: &Context<'_>, name: &str, input: &Input<'_>) -> ApiResult<Value> {
    let options = input.known_options("write ~/tools/<name>", WRITE_OPTIONS)?;
    let option = |key: &str| options.and_then(|options| options.get(key));
    let (owner, agent, name) = (context.owner_id.clone(), context.agent_id.clone(), name.to_owned());
    let now = context.app.clock.now_ms();
    if option("delete") == Some(&Ipld::Bool(true)) {
        let deleting = name.clone();
        let deleted =
            context.app.db.write(move |conn| agent_tools::delete_lambda(conn, &owner, &agent, &deleting)).await?;
        if deleted {
            context.tools_changed();
        }
        #[derive(Serialize)]
        struct Deleted<'a> {
            name: &'a str,
            deleted: bool,
        }
        let summary = if deleted { format!("Deleted tool {name}.") } else { format!("No tool named {name}.") };
        return record(summary, &Deleted { name: &name, deleted });
    }
    let authored: Json = match (input.get("content"), option("tool")) {
        (Some(Ipld::String(content)), _) => {
            serde_json::from_str(content).map_err(|_| ApiError::invalid(EXPECTS_JSON))?
        }
        (_, Some(tool)) => serde_json::to_value(Value(tool.clone())).map_err(|_| ApiError::invalid(EXPECTS_JSON))?,
        _ => return Err(ApiError::invalid(EXPECTS_JSON)),
    };
    let text = |key: &str| authored.get(key).and_then(Json::as_str).map(str::to_owned);
    let document = ToolDocument::lambda(LambdaInput {
        name: name.clone(),
        description: text("description"),
        summary: text("summary"),
        input: authored.get("input").cloned(),
        output: authored.get("output").cloned(),
        source: text("source"),
        runtime: text("runtime"),
    })?;
    let (cid, _) = document.encode()?;
    let saved = document.name.clone();
    context
        .app
        .db
        .write(move |conn| {
            match store::get(conn, &owner, &agent, &document.name)?.map(|stored| stored.document.kind) {
                Some(Kind::Builtin) => return Err(ApiError::invalid("Builtin tools cannot be edited")),
                Some(Kind::Mcp) => return Err(ApiError::invalid("MCP tools cannot be edited")),
                _ => {}
            }
            store::put_lambda(conn, &owner, &agent, &document, now)
        })
        .await?;
    context.tools_changed();
    #[derive(Serialize)]
    struct Saved<'a> {
        name: &'a str,
        cid: &'a str,
        kind: &'static str,
    }
    record(
        format!("Saved tool {saved} ({cid}). Its contract is in ~/tools now. {LAMBDA_RUNTIMES}"),
        &Saved { name: &saved, cid: &cid, kind: Kind::Lambda.as_str() },
    )
}

/// `call {tool, input}` (docs/runtime.md §4.4).
pub(super) async fn call(context: &Context<'_>, input: &Value) -> ApiResult<Value> {
    call_with(context, input, Misses::Guide).await
}

/// How [`call_with`] answers a call it cannot run as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Misses {
    /// A model pass: a successful result showing the listing or the contract, so the model
    /// corrects itself.
    Guide,
    /// A workflow script: an error (404 for a tool it cannot call, 400 for input that does not
    /// fit), which its promise rejects with.
    Refuse,
}

/// `call {tool, input}`, answering misses as `misses` says.
pub(super) async fn call_with(context: &Context<'_>, input: &Value, misses: Misses) -> ApiResult<Value> {
    let fields = Input::new(input);
    let Some(name) = fields.text("tool").map(registry::normalise) else {
        if misses == Misses::Refuse {
            return Err(ApiError::invalid("call requires a tool name"));
        }
        return listing(context, Some("call requires a tool name. Here is what you can call.".to_owned())).await;
    };
    let mismatch = |name: &str, contract: String, errors: Vec<String>| match misses {
        Misses::Guide => mismatch(name, contract, errors),
        Misses::Refuse => Err(ApiError::invalid(format!("Input for {name} does not fit: {}", errors.join("; ")))),
    };
    let arguments = match fields.get("input") {
        Some(value @ Ipld::Map(_)) => serde_json::to_value(Value(value.clone())).map_err(ApiError::internal)?,
        _ => Json::Object(Default::default()),
    };
    let granted = agent_tools::granted(context.app, &context.definition);
    let Some(callable) = Callable::named(name).filter(|callable| granted.contains(callable)) else {
        let stored = agent_tools::document(context.app, &context.owner_id, &context.agent_id, name).await?;
        return match stored.filter(|stored| stored.enabled) {
            Some(tool)
                if tool.document.kind == Kind::Mcp && agent_tools::mcp_granted(&tool.document, &context.definition) =>
            {
                let errors = crate::mcp::input_errors(&tool.document.input, &arguments);
                if !errors.is_empty() {
                    return mismatch(name, tool.document.contract_markdown(&tool.cid), errors);
                }
                let called = crate::mcp::run_tool(context.app, &context.owner_id, &tool.document, arguments).await?;
                for image in called.images {
                    context.show_image(image);
                }
                record(called.summary, &called.output)
            }
            Some(tool) if tool.document.kind == Kind::Lambda => {
                let errors = crate::tools::schema::value_errors(&tool.document.input, &arguments);
                if !errors.is_empty() {
                    return mismatch(name, tool.document.contract_markdown(&tool.cid), errors);
                }
                let executes = granted.contains(&Callable::Execute);
                let (summary, output) = with_tail(context, |progress| {
                    lambda::run(
                        context.app,
                        &context.owner_id,
                        &context.memory_root,
                        &tool.document,
                        &arguments,
                        executes,
                        progress,
                    )
                })
                .await?;
                if !output.changed_files.is_empty() {
                    context.memory_changed();
                }
                record(summary, &output)
            }
            _ if misses == Misses::Refuse => Err(ApiError::not_found(format!("No callable tool named {name}"))),
            _ => listing(context, Some(format!("No callable tool named {name}. Here is what you can call."))).await,
        };
    };
    let errors = crate::tools::schema::value_errors(callable.input_schema(), &arguments);
    if !errors.is_empty() {
        return mismatch(name, callable_contract(callable), errors);
    }
    match callable {
        Callable::Search => {
            let (summary, output) = search::run(context.app, &context.owner_id, &arguments).await?;
            record(summary, &output)
        }
        Callable::Query => super::hypermedia::query(context, &arguments).await,
        Callable::Attributes => super::hypermedia::attributes(context, &arguments).await,
        Callable::WebSearch => {
            let (summary, output) = web_search::run(context.app, &arguments).await?;
            record(summary, &output)
        }
        Callable::Execute => {
            let (summary, output) = with_tail(context, |progress| {
                execute::run(context.app, &context.owner_id, &context.memory_root, &arguments, progress)
            })
            .await?;
            if !output.changed_files.is_empty() {
                context.memory_changed();
            }
            record(summary, &output)
        }
    }
}

/// Runs a sandboxed execution `run` makes from a progress sender, forwarding its live output
/// tail to the context's listener while it runs (no sender when nobody listens).
async fn with_tail<'c, T, F, Fut>(context: &'c Context<'_>, run: F) -> ApiResult<T>
where
    F: FnOnce(Option<tokio::sync::mpsc::Sender<crate::sandbox::Progress>>) -> Fut,
    Fut: std::future::Future<Output = ApiResult<T>> + 'c,
{
    let (sender, mut receiver) = tokio::sync::mpsc::channel(4);
    let running = run(context.output_tail.is_some().then_some(sender));
    let forwarding = async {
        while let Some(progress) = receiver.recv().await {
            if let Some(tail) = &context.output_tail {
                tail(progress.output_tail);
            }
        }
    };
    let (ran, ()) = tokio::join!(running, forwarding);
    ran
}

/// The `~/tools` listing, with `summary` replacing the count line when given.
async fn listing(context: &Context<'_>, summary: Option<String>) -> ApiResult<Value> {
    let granted = agent_tools::granted(context.app, &context.definition);
    let documents = agent_tools::documents(context.app, &context.owner_id, &context.agent_id).await?;
    let callable: Vec<_> = documents
        .iter()
        .filter(|stored| stored.enabled && agent_tools::is_granted(stored, &granted, &context.definition))
        .collect();
    let authored: Vec<_> =
        documents.iter().filter(|stored| stored.enabled && stored.document.kind == Kind::Lambda).collect();
    let mut lines = vec!["# ~/tools".to_owned(), String::new(), "## Verbs (always available)".to_owned()];
    lines.extend(Tool::ALL.iter().map(|verb| format!("- {} — {}", verb.name(), verb.summary())));
    lines.extend([String::new(), "## Callable with the call verb".to_owned()]);
    if callable.is_empty() {
        lines.push("(none)".to_owned());
    }
    lines.extend(callable.iter().map(|stored| format!("- {} — {}", stored.document.name, stored.document.summary)));
    if !authored.is_empty() {
        lines.extend([String::new(), "## Authored tools (lambdas)".to_owned()]);
        lines.extend(authored.iter().map(|stored| format!("- {} — {}", stored.document.name, stored.document.summary)));
    }
    lines.extend([
        String::new(),
        "write ~/tools/<name> with JSON content {description, input, output?, source, runtime?} saves an authored \
         (lambda) tool: TypeScript `export default (input) => result` or python `def main(input): return result`."
            .to_owned(),
        LAMBDA_RUNTIMES.to_owned(),
    ]);
    #[derive(Serialize)]
    struct Listing {
        markdown: String,
        tools: Vec<String>,
    }
    let tools: Vec<String> = callable.iter().map(|stored| stored.document.name.clone()).collect();
    let summary = summary.unwrap_or_else(|| format!("{} verbs and {} callable tools.", Tool::ALL.len(), tools.len()));
    record(summary, &Listing { markdown: lines.join("\n"), tools })
}

/// The successful answer to input that does not fit a contract.
fn mismatch(name: &str, contract: String, validation_errors: Vec<String>) -> ApiResult<Value> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Mismatch {
        contract: String,
        validation_errors: Vec<String>,
    }
    record(
        format!("Input for {name} did not match its contract — here it is; call again with valid input."),
        &Mismatch { contract, validation_errors },
    )
}

/// A verb's contract: name, description, input schema.
fn verb_contract(verb: Tool) -> String {
    format!(
        "# {}\n\n{}\n\n{}",
        verb.name(),
        verb.description(),
        document::schema_section("Input schema", verb.schema())
    )
}

/// A callable's contract: name, description, input and output schemas.
pub(super) fn callable_contract(callable: Callable) -> String {
    let mut parts = vec![
        format!("# {}", callable.name()),
        String::new(),
        callable.description().to_owned(),
        String::new(),
        document::schema_section("Input schema", callable.input_schema()),
    ];
    if let Some(output) = callable.output_schema() {
        parts.extend([String::new(), document::schema_section("Output schema", output)]);
    }
    parts.join("\n")
}
