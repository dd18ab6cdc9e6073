//! The layers of `ARCHITECTURE.md`, checked: each module of this crate may name only the
//! modules its layer may, only the edge names the HTTP and WebSocket stack, and only `store`
//! modules and `db/` run SQL.
//!
//! A module is a top-level folder or file of `src/`; what it names is every `crate::<module>`
//! path and every `use crate::{…}` group in its non-test code. Test code (`#[cfg(test)]` modules,
//! `tests.rs` files, which their modules declare under `#[cfg(test)]`, and `*_tests` folders) may
//! reach anywhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, top first. A module may name its own layer's modules and those of the layers
/// below it, never those above.
const LAYERS: &[(&str, &[&str])] = &[
    ("wiring", &["lib", "main", "server", "leftovers", "ops", "testing"]),
    ("edge", &["edge", "http", "ws", "auth", "dispatch"]),
    (
        "features",
        &[
            "agents",
            "attachments",
            "collaborators",
            "identities",
            "mcp",
            "memory",
            "providers",
            "quota",
            "runtime",
            "secrets",
            "sessions",
            "signers",
            "tools",
            "triggers",
            "uploads",
            "verbs",
            "workflows",
        ],
    ),
    ("engine", &["runs"]),
    ("shared", &["app", "access", "caller", "config", "idempotency", "limits"]),
    ("storage and clients", &["db", "bus", "hm", "model", "sandbox"]),
    ("foundation", &["error", "validate", "clock", "durable", "telemetry"]),
];

/// The transport's crates: only the edge and the wiring may name them.
const TRANSPORT_CRATES: &[&str] =
    &["axum", "hyper", "hyper_util", "http_body_util", "tower_service", "tokio_tungstenite"];

/// Names that run up a layer on purpose: `(from, path, why)`.
const ALLOWED: &[(&str, &str, &str)] = &[
    // The engine appends a session's durable events (a failed run's `error`, a child's result) in
    // the transaction that changes the run: the session log is storage both stand on.
    ("runs", "sessions::events", "the session event log"),
    // The session rows the engine's transactions read and touch: the status mirror it derives,
    // the owner of a failed run's session, the run that spawned a child's session.
    ("runs", "sessions::store", "the session rows under the status mirror"),
    // The App holds the in-memory state of a few features; each is a leaf module.
    ("app", "runtime::titles", "automatic titles in progress"),
    ("app", "verbs::in_flight", "user verbs in progress"),
    ("app", "providers::signin", "subscription sign-ins in progress"),
    ("app", "secrets::crypto", "the key that seals secrets"),
    ("app", "runs", "the run engine handle"),
    // The configuration holds these values as their owners type them.
    ("config", "runs::Limits", "the engine's knobs"),
];

/// The connection methods that run SQL (rusqlite's `Connection` and `Statement`).
const SQL_CALLS: &[&str] =
    &[".prepare(", ".prepare_cached(", ".execute(", ".execute_batch(", ".query_row(", ".query_map("];

/// Calls of those names outside a store that are not SQL, or SQL that must stay where it is:
/// `(file, call, why)`.
const SQL_ALLOWED: &[(&str, &str, &str)] = &[
    // The engine hands a claimed run to the runtime: `Executor::execute`, not a statement.
    ("runs/engine.rs", "executor.execute(", "the Executor trait's method"),
];

/// Whether `relative` (a path below `src/`) may run SQL: `db/`, a `store.rs`, a `store/` folder.
fn may_run_sql(relative: &str) -> bool {
    relative.starts_with("db/") || relative.split('/').any(|part| part == "store" || part == "store.rs")
}

/// The SQL calls of `code`, as `<receiver>.<method>(` (the receiver's last word, if any).
fn sql_calls(code: &str) -> Vec<String> {
    let mut calls = Vec::new();
    for call in SQL_CALLS {
        for (at, _) in code.match_indices(call) {
            let receiver = code[..at].rsplit(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or_default();
            calls.push(format!("{receiver}{call}"));
        }
    }
    calls
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, modules)| modules.contains(&module))
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.file_name().unwrap().to_string_lossy().ends_with("_tests") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|extension| extension == "rs")
                && path.file_name().is_some_and(|name| name != "layering.rs")
            {
                found.push(path);
            }
        }
    }
    found
}

/// The non-test code of a file: up to its first `#[cfg(test)]`, without comments.
fn code(source: &str) -> String {
    let source = source.split("#[cfg(test)]").next().unwrap_or_default();
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths below `crate::` a file names: `crate::a::b` gives `a::b`; `use crate::{a, b::{c, d}}`
/// gives `a`, `b::c` and `b::d`.
fn named(code: &str) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        expand("", &code[at + "crate::".len()..], &mut paths);
    }
    paths
}

/// Adds the paths of the use tree at the start of `tree`, each prefixed with `prefix`.
fn expand(prefix: &str, tree: &str, paths: &mut BTreeSet<String>) {
    let end = tree.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(tree.len());
    let path = format!("{prefix}{}", &tree[..end]);
    let Some(group) = tree[end..].strip_prefix('{') else {
        paths.insert(path.trim_end_matches(':').to_owned());
        return;
    };
    let (mut depth, mut start) = (0, 0);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                expand(&path, group[start..at].trim_start(), paths);
                return;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&path, group[start..at].trim_start(), paths);
                start = at + 1;
            }
            _ => {}
        }
    }
}

/// The external crates a file names in `use` lines or paths.
fn names_crate(code: &str, krate: &str) -> bool {
    code.match_indices(krate).any(|(at, _)| {
        let before = code[..at].chars().last();
        let after = &code[at + krate.len()..];
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') && after.starts_with("::")
    })
}

#[test]
fn every_module_names_only_its_layer_and_those_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for file in files(&src) {
        let relative = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        let module = relative.split('/').next().unwrap().trim_end_matches(".rs").to_owned();
        let Some(layer) = layer_of(&module) else {
            violations.push(format!("{relative}: module `{module}` is in no layer (add it to LAYERS)"));
            continue;
        };
        let code = code(&std::fs::read_to_string(&file).unwrap());
        for path in named(&code) {
            let target = path.split("::").next().unwrap_or_default();
            if target == module || target.is_empty() {
                continue;
            }
            let Some(target_layer) = layer_of(target) else { continue };
            let allowed = ALLOWED.iter().any(|(from, to, _)| *from == module && path.starts_with(to));
            if target_layer < layer && !allowed {
                violations.push(format!(
                    "{relative}: the {} layer names crate::{path} of the {} layer above it",
                    LAYERS[layer].0, LAYERS[target_layer].0
                ));
            }
        }
        if layer > LAYERS.iter().position(|(name, _)| *name == "edge").unwrap_or(0) {
            for krate in TRANSPORT_CRATES {
                if names_crate(&code, krate) {
                    violations.push(format!("{relative}: names `{krate}`, which only the edge may"));
                }
            }
            // An outbound client's statuses (`reqwest::StatusCode`) are what a service answered us.
            if code.match_indices("StatusCode").any(|(at, _)| !code[..at].ends_with("reqwest::")) {
                violations.push(format!("{relative}: names an HTTP status, which only the edge may"));
            }
        }
    }
    assert!(violations.is_empty(), "layering violations:\n{}", violations.join("\n"));
}

#[test]
fn only_stores_and_db_run_sql() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut violations = Vec::new();
    for file in files(&src) {
        let relative = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        if may_run_sql(&relative) || relative.ends_with("/tests.rs") {
            continue;
        }
        for call in sql_calls(&code(&std::fs::read_to_string(&file).unwrap())) {
            let allowed = SQL_ALLOWED.iter().any(|(path, allowed, _)| *path == relative && *allowed == call);
            if !allowed {
                violations
                    .push(format!("{relative}: `{call}` outside a store (move the statement to the feature's store)"));
            }
        }
    }
    assert!(violations.is_empty(), "SQL outside the stores:\n{}", violations.join("\n"));
}

#[test]
fn the_checker_sees_what_it_checks() {
    let code = code(
        "use crate::{a, b::{c, d::{self, E}}, f};\nuse crate::d::E;\n// crate::commented\nfn f() { crate::g::h(); }\n\
         #[cfg(test)]\nuse crate::z;",
    );
    let expected = ["a", "b::c", "b::d::self", "b::d::E", "f", "d::E", "g::h"];
    assert_eq!(named(&code), BTreeSet::from(expected.map(str::to_owned)));
    assert!(names_crate("use axum::Router;", "axum"));
    assert!(!names_crate("use my_axum::Router;", "axum"));
    assert_eq!(layer_of("runs").map(|layer| LAYERS[layer].0), Some("engine"));
    let sql = self::code(
        "conn.prepare_cached(\"SELECT 1\")?.query_row([], f)?;\n    conn\n        .execute(\"DELETE\", [])?;\n\
         executor.execute(run); // conn.execute_batch(\"x\")\n#[cfg(test)]\nconn.execute_batch(\"y\");",
    );
    let mut calls = sql_calls(&sql);
    calls.sort();
    assert_eq!(calls, [".execute(", ".query_row(", "conn.prepare_cached(", "executor.execute("]);
    assert!(may_run_sql("runs/store.rs") && may_run_sql("db/cbor.rs") && may_run_sql("x/store/rows.rs"));
    assert!(!may_run_sql("runs/queue.rs") && !may_run_sql("restore.rs"));
}
