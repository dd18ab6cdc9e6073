//! The operator's commands of the `seed-agents-server` binary (server/README.md "Operations"):
//! `backup`, `verify`, `restore`, `rotate-secret-key` and `doctor`. Each works on the data
//! directory of `--data-dir` and prints what it did, or what is wrong, to stdout; with no
//! command the binary serves.

mod backup;
mod doctor;
mod files;
pub(crate) mod rotate;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;

/// An operator's command.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Back up the data directory, also while the server runs.
    ///
    /// A consistent snapshot of the database, the agents' files, attachments, staged uploads and
    /// the secret key, with a manifest of SHA-256 checksums. The backup holds the key: keep it as
    /// safe as the server.
    Backup {
        /// The backup directory (must be missing or empty; created with mode 0700).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
    /// Check a backup.
    ///
    /// Every file against the manifest, the database's integrity_check and schema version, and
    /// that every stored secret opens with the backup's key.
    Verify {
        /// The backup directory.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
    },
    /// Restore a backup into --data-dir, which must be missing or empty.
    ///
    /// The backup is verified first; a server refuses to start on a restore that did not finish.
    Restore {
        /// The backup directory.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
    },
    /// Re-encrypt every stored secret under a new secret.key (server stopped).
    ///
    /// One transaction; safe to interrupt at any point (run it again, or start the server, to
    /// finish or undo it). Refused when the key comes from SEED_AGENTS_SECRET_KEY.
    RotateSecretKey,
    /// Check the data directory and say what to fix.
    ///
    /// Database integrity, the key file, stored secrets, orphaned and temp files, free disk;
    /// exits 1 when something needs fixing.
    Doctor,
}

/// Runs `command` on the data directory of `config`; success, or 1 with the reason printed.
pub fn run(command: &Command, config: &Config) -> ExitCode {
    let outcome = match command {
        Command::Backup { to } => run_backup(config, to),
        Command::Verify { from } => run_verify(from),
        Command::Restore { from } => run_restore(config, from),
        Command::RotateSecretKey => run_rotate(config),
        Command::Doctor => run_doctor(config),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("seed-agents-server: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run_backup(config: &Config, to: &std::path::Path) -> Result<(), String> {
    let started = std::time::Instant::now();
    let summary = backup::backup(config, to)?;
    let manifest = &summary.manifest;
    let bytes: u64 = manifest.entries().map(|entry| entry.bytes).sum();
    println!(
        "backed up {} into {}: database ({} bytes, schema {}), {} files, {bytes} bytes in all, in {:.2} s",
        config.data_dir.display(),
        to.display(),
        manifest.database.bytes,
        manifest.schema_version,
        manifest.files.len(),
        started.elapsed().as_secs_f64()
    );
    match summary.key {
        files::KeySource::File => {
            println!("the backup holds secret.key (mode 0600): anyone who reads it can decrypt the stored secrets")
        }
        files::KeySource::Environment => println!(
            "the key comes from SEED_AGENTS_SECRET_KEY and is not in the backup: keep that value with it, or the \
             stored secrets cannot be decrypted after a restore"
        ),
    }
    Ok(())
}

fn run_verify(from: &std::path::Path) -> Result<(), String> {
    let verified = backup::verify(from);
    if !verified.problems.is_empty() {
        return Err(format!("{} does not verify:\n  {}", from.display(), verified.problems.join("\n  ")));
    }
    let manifest = verified.manifest.ok_or("no manifest")?;
    let secrets = match verified.secrets_checked {
        Some(count) => format!("all {count} stored secrets open with its key"),
        None => "its key is SEED_AGENTS_SECRET_KEY, not in the backup".to_owned(),
    };
    println!(
        "{} is sound: {} files match the manifest, integrity_check ok, schema {}; {secrets}",
        from.display(),
        manifest.entries().count(),
        manifest.schema_version
    );
    Ok(())
}

fn run_restore(config: &Config, from: &std::path::Path) -> Result<(), String> {
    let restored = backup::restore(config, from)?;
    println!(
        "restored {} into {}: {} files; {} agents pointed at the new directory",
        from.display(),
        config.data_dir.display(),
        restored.manifest.entries().count(),
        restored.relocated
    );
    if restored.manifest.key == files::KeySource::Environment {
        println!("start the server with the SEED_AGENTS_SECRET_KEY the backup was taken with");
    }
    Ok(())
}

fn run_rotate(config: &Config) -> Result<(), String> {
    let rotated = rotate::rotate(config)?;
    match rotated.earlier {
        rotate::Interrupted::None => {}
        rotate::Interrupted::Finished => println!("an interrupted rotation had committed; it was finished first"),
        rotate::Interrupted::Undone => println!("an interrupted rotation had not committed; it was undone first"),
    }
    println!(
        "rotated the secret key: {} stored secrets re-encrypted; the new key is in {}. Back it up now: backups \
         taken before hold the old key (and open only with it)",
        rotated.resealed,
        config.data_dir.join(crate::secrets::crypto::SecretKey::FILE_NAME).display()
    );
    Ok(())
}

fn run_doctor(config: &Config) -> Result<(), String> {
    let findings = doctor::examine(config);
    let mut problems = 0;
    for finding in &findings {
        let label = match finding.level {
            doctor::Level::Ok => "ok     ",
            doctor::Level::Note => "note   ",
            doctor::Level::Problem => {
                problems += 1;
                "PROBLEM"
            }
        };
        println!("{label} {}", finding.what);
        if let Some(fix) = &finding.fix {
            println!("        -> {fix}");
        }
    }
    match problems {
        0 => Ok(()),
        1 => Err("1 problem found".to_owned()),
        n => Err(format!("{n} problems found")),
    }
}
