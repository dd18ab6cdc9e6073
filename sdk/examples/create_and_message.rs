//! Run with: `SEED_AGENTS_KEY=<64 hex digits> cargo run -p seed-agents-sdk --example create_and_message -- SERVER_URL PROVIDER_ID MODEL`
//!
//! Creates an agent on a model provider the account has set up (`SetModelProvider`), opens a
//! session with it, sends one message and follows the session until the agent's answer is stored.

use futures_util::StreamExt as _;
use seed_agents_sdk::types::{
    AgentDefinition, AgentDefinitionSystemPrompt, CreateAgent, CreateSession, MessageSession,
    MessageSessionContentPart, TextContentPart,
};
use seed_agents_sdk::{Client, Ed25519Signer, Event};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: create_and_message SERVER_URL PROVIDER_ID MODEL";
    let (Some(server), Some(provider), Some(model)) = (args.next(), args.next(), args.next()) else {
        return Err(usage.into());
    };
    let client = Client::new(&server, Ed25519Signer::from_env("SEED_AGENTS_KEY")?)?;

    // Required fields go to `new`; optional ones are chained setters. Writes that take an
    // idempotency key get a fresh one, so a transport failure is retried without acting twice.
    let definition = AgentDefinition::new(
        model,
        provider,
        "Release helper",
        AgentDefinitionSystemPrompt::String("Answer in one paragraph.".to_owned()),
    )
    .tools(vec!["read".to_owned(), "write".to_owned()]);
    let agent = client.create_agent(CreateAgent::new(definition)).await?;
    // Ids are typed (`AgentId`, `SessionId`): `&agent.agent_id` passes where an agent id is taken.
    let session = client.create_session(CreateSession::new(&agent.agent_id).title("First chat")).await?;

    // Follow the session before sending, so no event is missed.
    let mut events = client.subscribe(format!("sessions/{}", session.session_id)).start();
    let text = MessageSessionContentPart::from(TextContentPart::new("What changed in the last release?"));
    let sent = client.message_session(MessageSession::new(vec![text], &session.session_id)).await?;
    println!("agent {} session {} (answer event {})", agent.agent_id, session.session_id, sent.assistant_event_id);
    while let Some(event) = events.next().await {
        match event? {
            Event::Append { event, .. } => {
                println!("{} {:?}", event.seq, event.event);
                if !sent.assistant_event_id.is_empty() && event.id == sent.assistant_event_id {
                    break;
                }
            }
            Event::Error { message, .. } => return Err(message.into()),
            _ => {}
        }
    }
    Ok(())
}
