//! `seed-agents-codegen [--check]`: regenerate the protocol code from the schema, or check that
//! the committed files are current.
//!
//! Run with: `cargo run -p seed-agents-codegen` (write) or `cargo run -p seed-agents-codegen -- --check`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(other) => {
            eprintln!("seed-agents-codegen: unknown argument {other:?}; usage: seed-agents-codegen [--check]");
            return ExitCode::from(2);
        }
    };
    let root = seed_agents_codegen::workspace_root();
    let result = if check { seed_agents_codegen::stale(&root) } else { seed_agents_codegen::write(&root) };
    match result {
        Ok(paths) if check && !paths.is_empty() => {
            for path in &paths {
                eprintln!("{} is not up to date with schema/json/", path.display());
            }
            eprintln!("run `cargo run -p seed-agents-codegen` and commit the result");
            ExitCode::FAILURE
        }
        Ok(paths) => {
            if !check {
                for path in paths {
                    println!("wrote {}", path.display());
                }
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("seed-agents-codegen: {err}");
            ExitCode::FAILURE
        }
    }
}
