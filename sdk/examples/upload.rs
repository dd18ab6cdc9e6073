//! Run with: `SEED_AGENTS_SEED=<64 hex digits> cargo run --release -p seed-agents-sdk --example upload -- <server-url> <agent-id> <file> [<memory-path>]`
//!
//! Uploads a file of any size into an agent's memory with `Client::upload_file`, printing
//! progress, and resumes once if the upload stops midway (the server keeps what it received).
//! The seed is the account's Ed25519 seed (the account must own the agent or write to it); the
//! memory path defaults to `uploads/<file name>`.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use seed_agents_sdk::types::{FileUploadTarget, MemoryUploadTarget};
use seed_agents_sdk::{Client, Ed25519Signer, Error, Progress};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [server, agent_id, file, rest @ ..] = args.as_slice() else {
        return Err("usage: upload <server-url> <agent-id> <file> [<memory-path>]".into());
    };
    let signer = Ed25519Signer::from_env("SEED_AGENTS_SEED")?;
    let name = Path::new(file).file_name().and_then(|name| name.to_str()).ok_or("the file has no name")?;
    let path = rest.first().cloned().unwrap_or_else(|| format!("uploads/{name}"));

    let client = Client::new(server, signer)?;
    let target = FileUploadTarget::from(MemoryUploadTarget::new(agent_id.clone(), path.clone()));
    let started = Instant::now();
    let done = match client.upload_file(target, file, |progress| report(progress, started)).await {
        Err(Error::Upload { upload_id, received, source, .. }) => {
            eprintln!("\nstopped at {received} bytes ({source}); resuming");
            let mut source = tokio::fs::File::open(file).await?;
            let size = source.metadata().await?.len();
            tokio::io::AsyncSeekExt::seek(&mut source, std::io::SeekFrom::Start(received)).await?;
            client.resume_upload(upload_id, size, received, source, |progress| report(progress, started)).await?
        }
        other => other?,
    };
    let entry = done.entry.ok_or("the server answered without a memory entry")?;
    println!("\nstored {} ({} bytes) in {:.1} s", entry.path, entry.size, started.elapsed().as_secs_f64());
    Ok(())
}

fn report(progress: Progress, started: Instant) {
    let seconds = started.elapsed().as_secs_f64().max(1e-3);
    let percent = 100.0 * progress.received as f64 / progress.size.max(1) as f64;
    let rate = progress.received as f64 / seconds / 1e6;
    print!("\r{percent:5.1}% of {} bytes, {rate:.0} MB/s", progress.size);
    let _ = std::io::stdout().flush();
}
