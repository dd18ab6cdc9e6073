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
    if check {
        return match seed_agents_codegen::stale(&root) {
            Ok(stale) if stale.is_empty() => ExitCode::SUCCESS,
            Ok(stale) => {
                for file in &stale {
                    eprintln!("{file}");
                }
                eprintln!("run `cargo run -p seed-agents-codegen` and commit the result");
                ExitCode::FAILURE
            }
            Err(err) => {
                eprintln!("seed-agents-codegen: {err}");
                ExitCode::FAILURE
            }
        };
    }
    match seed_agents_codegen::write(&root) {
        Ok(done) => {
            for path in done.written {
                println!("wrote {}", path.display());
            }
            for path in done.removed {
                println!("removed {} (no longer generated)", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("seed-agents-codegen: {err}");
            ExitCode::FAILURE
        }
    }
}
