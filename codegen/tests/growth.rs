//! Compatibility of callers with protocol growth: a caller written against today's generated
//! types still compiles after the schema gains an optional field, and a struct literal (what the
//! generated `new` and setters replace) does not.
//!
//! The test generates the protocol types twice into a small crate under the target directory
//! (today's schema, then the schema with an optional `addedLater` field in an action and in a
//! nested type) and type-checks a fixed caller against each with `cargo check`, offline (whether
//! a caller compiles is decided by the type checker; no code needs generating, so the dependencies
//! are only checked too, which is most of this test's time on a fresh machine). The crate's own
//! target directory (`<target>/codegen-growth`) keeps the dependencies between runs: the first
//! check compiles them, later ones only the generated module.

use std::path::{Path, PathBuf};
use std::process::Command;

use seed_agents_codegen::model::{Model, read_documents};
use serde_json::{Value as Json, json};

/// The caller: constructors, setters, field reads and writes, matches on generated enums.
const CALLER: &str = r#"
use crate::generated::*;

pub fn build() -> (CreateSession, UpdateAgent, ListAgents) {
    let create = CreateSession::new("agent-1").title("Release notes").client_request_id("key-1");
    let definition = AgentDefinition::new("model", "provider", "Helper", AgentDefinitionSystemPrompt::String("Be brief.".into()))
        .tools(vec!["read".to_owned()]);
    let mut changed = definition.clone();
    changed.name = "Renamed".to_owned();
    (create, UpdateAgent::new("agent-1", changed), ListAgents::default())
}

pub fn read(info: &AgentInfo) -> (&str, usize) {
    (&info.definition.name, info.extra.len())
}

pub fn message(response: &AgentResponse) -> Option<&str> {
    match response {
        AgentResponse::Error(error) => Some(&error.message),
        _ => None,
    }
}
"#;

/// What `new` and the setters replace: it must stop compiling once a field is added.
const LITERAL: &str = r#"
use crate::generated::*;

pub fn literal() -> GetAgent {
    GetAgent { agent_id: "agent-1".into() }
}
"#;

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

/// Writes the crate with `generated` as its generated module.
fn write_crate(dir: &Path, root: &Path, generated: &str) {
    std::fs::create_dir_all(dir.join("src")).expect("crate dir");
    let manifest = format!(
        r#"[package]
name = "codegen-growth"
version = "0.0.0"
edition = "2024"
publish = false

[workspace]

[features]
literal = []

[dependencies]
seed-agents-protocol = {{ path = "{}" }}
serde = {{ version = "1", features = ["derive"] }}
"#,
        root.join("schema").display()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("manifest");
    // The workspace's lock pins the same versions (cargo drops what this crate does not use).
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("lock file");
    let lib = "#![allow(dead_code, clippy::all)]\n\
               pub mod generated {\n    include!(\"generated.rs\");\n}\n\
               pub mod caller;\n\
               #[cfg(feature = \"literal\")]\npub mod literal;\n";
    std::fs::write(dir.join("src/lib.rs"), lib).expect("lib");
    std::fs::write(dir.join("src/caller.rs"), CALLER).expect("caller");
    std::fs::write(dir.join("src/literal.rs"), LITERAL).expect("literal");
    std::fs::write(dir.join("src/generated.rs"), generated).expect("generated");
}

/// Type-checks the crate (`cargo check`); answers success and the compiler's output.
fn check(dir: &Path, target: &Path, features: &[&str]) -> (bool, String) {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()));
    command.current_dir(dir).args(["check", "--offline", "--quiet", "--target-dir"]).arg(target);
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    let output = command.env_remove("RUSTFLAGS").output().expect("run cargo");
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn generate(documents: Vec<(String, Json)>) -> String {
    let model = Model::from_documents(documents).expect("schema loads");
    let types = seed_agents_codegen::types::generate(&model).expect("types generate");
    prettyplease::unparse(&types.file)
}

/// Adds an optional string property `addedLater` to the definition `name`.
fn add_optional_field(documents: &mut [(String, Json)], name: &str) {
    let definition =
        documents.iter_mut().find_map(|(_, doc)| doc.get_mut("$defs")?.get_mut(name)).expect("definition exists");
    let properties = definition.get_mut("properties").and_then(Json::as_object_mut).expect("an object");
    properties.insert("addedLater".to_owned(), json!({ "type": "string", "x-since": 3 }));
}

#[test]
fn an_added_optional_field_breaks_no_caller_but_breaks_a_struct_literal() {
    let root = seed_agents_codegen::workspace_root();
    let target = target_dir(&root).join("codegen-growth");
    let dir = target.join("crate");
    let today = read_documents(&root.join("schema/json")).expect("schema files");

    write_crate(&dir, &root, &generate(today.clone()));
    let (ok, output) = check(&dir, &target.join("target"), &[]);
    assert!(ok, "the caller does not compile against today's types:\n{output}");

    let mut grown = today;
    for name in ["CreateSession", "AgentDefinition", "GetAgent"] {
        add_optional_field(&mut grown, name);
    }
    let generated = generate(grown);
    assert!(generated.contains("pub added_later:"), "the new field is generated");
    write_crate(&dir, &root, &generated);
    let (ok, output) = check(&dir, &target.join("target"), &[]);
    assert!(ok, "the caller stopped compiling when optional fields were added:\n{output}");

    // The control: a struct literal written against today's type stops compiling (the new field
    // is missing), so the constructors are what keeps the caller compiling. (Here the literal is
    // in the crate that holds the types; in any other crate `#[non_exhaustive]` refuses it even
    // before the field is added.)
    let (ok, output) = check(&dir, &target.join("target"), &["literal"]);
    assert!(!ok, "a struct literal of a generated type compiled");
    assert!(output.contains("missing `added_later`"), "refused for the new field, not for another reason:\n{output}");
}
