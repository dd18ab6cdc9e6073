//! Run with: `SEED_AGENTS_KEY=<64 hex digits> cargo run -p seed-agents-sdk --example list_agents -- [SERVER_URL]`
//!
//! Lists the account's agents, then every page of each agent's sessions.

use futures_util::TryStreamExt as _;
use seed_agents_sdk::types::{ListAgents, ListSessions};
use seed_agents_sdk::{Client, Ed25519Signer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::args().nth(1).unwrap_or_else(|| "http://127.0.0.1:3050".to_owned());
    let client = Client::new(&server, Ed25519Signer::from_env("SEED_AGENTS_KEY")?)?;
    let agents = client.list_agents(ListAgents::new()).await?;
    for agent in agents.agents {
        println!("{} {} ({:?})", agent.id, agent.definition.name, agent.status);
        // Pages come as a stream; each page is one call, following `nextCursor`.
        let mut pages = std::pin::pin!(client.list_sessions_pages(ListSessions::new().agent_id(agent.id).limit(50)));
        while let Some(page) = pages.try_next().await? {
            for session in page.sessions {
                println!("  {} {}", session.id, session.title.as_deref().unwrap_or("(untitled)"));
            }
        }
    }
    Ok(())
}
