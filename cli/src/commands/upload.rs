//! `upload <file> --agent ID --path P | --session ID`: the SDK's chunked upload with progress.

use std::io::IsTerminal as _;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use seed_agents_sdk::Progress;
use seed_agents_sdk::protocol::Response as _;
use seed_agents_sdk::types::{FileUploadTarget, MemoryUploadTarget, SessionAttachmentUploadTarget};

use super::Context;
use crate::args::{ProgressMode, Upload};
use crate::failure::Failure;
use crate::output::{self, Output};

/// Runs `upload`.
pub async fn upload(context: &Context, args: Upload) -> Result<(), Output> {
    let target = target(&args)?;
    let client = context.client()?;
    let file = tokio::fs::File::open(&args.file)
        .await
        .map_err(|error| Failure::local(format!("cannot open {}: {error}", args.file.display())))?;
    let size = file
        .metadata()
        .await
        .map_err(|error| Failure::local(format!("cannot read {}: {error}", args.file.display())))?
        .len();
    let mut progress = Shown::new(args.progress, size);
    let done = client.upload(target, size, file, |step| progress.update(step)).await;
    progress.finish();
    output::response(&done?.into_response(), args.format, None)
}

/// The upload's target: agent memory, or a session attachment named after the file unless
/// `--name` says otherwise.
fn target(args: &Upload) -> Result<FileUploadTarget, Failure> {
    match (&args.agent, &args.path, &args.session) {
        (Some(agent), Some(path), None) => Ok(MemoryUploadTarget::new(agent, path).into()),
        (None, None, Some(session)) => {
            let name = match &args.name {
                Some(name) => name.clone(),
                None => file_name(&args.file)?,
            };
            let mut target = SessionAttachmentUploadTarget::new(name, session);
            if let Some(mime) = &args.mime_type {
                target = target.mime_type(mime);
            }
            Ok(target.into())
        }
        _ => Err(Failure::usage("name one target: --agent ID --path P, or --session ID")),
    }
}

fn file_name(path: &Path) -> Result<String, Failure> {
    path.file_name()
        .and_then(|name| name.to_str())
        .map(str::to_owned)
        .ok_or_else(|| Failure::usage(format!("{} has no file name to attach under: pass --name", path.display())))
}

/// The progress bar's layout: bar, bytes acknowledged of the total, rate, time left.
const BAR: &str = "{bar:40} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}";

/// Progress as the user asked for it.
enum Shown {
    Bar(ProgressBar),
    Plain,
    Nothing,
}

impl Shown {
    fn new(mode: ProgressMode, size: u64) -> Self {
        match mode {
            ProgressMode::Auto if std::io::stderr().is_terminal() => {
                let bar = ProgressBar::with_draw_target(Some(size), ProgressDrawTarget::stderr());
                if let Ok(style) = ProgressStyle::with_template(BAR) {
                    bar.set_style(style);
                }
                Shown::Bar(bar)
            }
            ProgressMode::Auto | ProgressMode::None => Shown::Nothing,
            ProgressMode::Plain => Shown::Plain,
        }
    }

    fn update(&mut self, step: Progress) {
        match self {
            Shown::Bar(bar) => bar.set_position(step.received),
            Shown::Plain => eprintln!("{}/{} bytes", step.received, step.size),
            Shown::Nothing => {}
        }
    }

    fn finish(&self) {
        if let Shown::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser as _;
    use seed_agents_sdk::protocol::wire;

    fn upload_args(args: &[&str]) -> Upload {
        match Cli::parse_from([&["seed-agents", "upload", "dir/notes.pdf"], args].concat()).command {
            Command::Upload(upload) => upload,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_bar_template_parses() {
        assert!(ProgressStyle::with_template(BAR).is_ok());
    }

    #[test]
    fn targets_take_their_wire_form() {
        let memory = target(&upload_args(&["--agent", "a1", "--path", "docs/n.pdf"])).unwrap();
        assert_eq!(
            wire::to_ipld(&memory).unwrap(),
            crate::json::to_ipld(serde_json::json!({"kind": "memory", "agentId": "a1", "path": "docs/n.pdf"})).unwrap()
        );
        let attachment = target(&upload_args(&["--session", "s1", "--mime-type", "application/pdf"])).unwrap();
        assert_eq!(
            wire::to_ipld(&attachment).unwrap(),
            crate::json::to_ipld(serde_json::json!({
                "kind": "session-attachment", "sessionId": "s1", "name": "notes.pdf", "mimeType": "application/pdf"
            }))
            .unwrap()
        );
    }
}
