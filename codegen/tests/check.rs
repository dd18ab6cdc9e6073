//! Drift check: the committed generated files equal what the schema generates now.
//!
//! On a mismatch the test names the stale files and the command that fixes them. With
//! `UPDATE_GENERATED=1` it rewrites them instead (then review and commit the diff).

#[test]
fn generated_files_are_up_to_date() {
    let root = seed_agents_codegen::workspace_root();
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        seed_agents_codegen::write(&root).expect("write generated files");
        return;
    }
    let stale = seed_agents_codegen::stale(&root).expect("generate");
    assert!(
        stale.is_empty(),
        "{} not up to date with schema/json/; run `cargo run -p seed-agents-codegen` and commit the result",
        stale.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    );
}

#[test]
fn every_schema_action_has_a_typed_sdk_call_and_a_table_row() {
    let root = seed_agents_codegen::workspace_root();
    let model = seed_agents_codegen::model::Model::load(&root.join("schema/json")).expect("schema");
    let sdk = std::fs::read_to_string(root.join("sdk/src/generated.rs")).expect("sdk calls");
    for def in model.of_kind(seed_agents_codegen::model::Kind::Action) {
        if def.http() {
            let method = format!("pub async fn {}(", seed_agents_codegen::table::snake_case(&def.name));
            assert!(sdk.contains(&method), "no SDK call for {}", def.name);
        }
    }
}
