//! Keyset pagination over `(updatedAt, id)`: sessions sharing one millisecond are each listed
//! exactly once, across page boundaries, in order.

use std::collections::BTreeSet;

use seed_agents_protocol::generated::{CreateSession, ListSessions, SessionListCursor};

use crate::support::TestServer;
use crate::support::db::write_db;

fn list(
    agent_id: Option<seed_agents_protocol::AgentId>,
    cursor: Option<SessionListCursor>,
    limit: i64,
) -> ListSessions {
    ListSessions {
        agent_id,
        cursor,
        exclude_triggered: None,
        include_children: None,
        limit: Some(limit),
        parent_session_id: None,
    }
}

#[tokio::test]
async fn every_session_exactly_once_across_pages_with_tied_timestamps() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent_a = owner.create_agent("A").await;
    let agent_b = owner.create_agent("B").await;
    let mut created = Vec::new();
    for index in 0..90 {
        let agent_id = if index % 3 == 0 { agent_b.clone() } else { agent_a.clone() };
        let create =
            CreateSession { agent_id, client_request_id: None, model_override: None, thoroughness: None, title: None };
        created.push(owner.call(create).await.unwrap().session_id);
    }
    // Three timestamps shared by 30 sessions each, like a trigger firing over a batch of events:
    // the n-th session created (from 1) gets 1000 + n % 3, so B's 30 share one and A's 60 two.
    let stamps: Vec<(String, i64)> =
        created.iter().zip(1..).map(|(id, position)| (id.to_string(), 1000 + position % 3)).collect();
    write_db(&server, move |conn| {
        for (id, updated_at) in stamps {
            conn.execute("UPDATE sessions SET updated_at = ?2 WHERE id = ?1", (id, updated_at))?;
        }
        Ok(())
    })
    .await;
    let created: BTreeSet<_> = created.into_iter().collect();

    for (agent, expected) in [(None, created.len()), (Some(agent_a.clone()), 60), (Some(agent_b.clone()), 30)] {
        for limit in [1, 7, 30, 200] {
            let mut seen = Vec::new();
            let mut cursor = None;
            loop {
                let page = owner.call(list(agent.clone(), cursor.take(), limit)).await.unwrap();
                assert!(page.sessions.len() as i64 <= limit);
                seen.extend(page.sessions.iter().map(|session| (session.updated_at, session.id.clone())));
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(seen.len(), expected, "agent {agent:?} limit {limit}: count");
            let unique: BTreeSet<_> = seen.iter().map(|(_, id)| id.clone()).collect();
            assert_eq!(unique.len(), expected, "agent {agent:?} limit {limit}: duplicates");
            let mut sorted = seen.clone();
            sorted.sort_by(|a, b| b.cmp(a));
            assert_eq!(seen, sorted, "agent {agent:?} limit {limit}: order is (updatedAt, id) descending");
            if agent.is_none() {
                assert!(unique == created);
            }
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn limits_are_clamped_and_the_agent_side_list_names_referenced_agents() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent_a = owner.create_agent("A").await;
    let _unused = owner.create_agent("Unused").await;
    for _ in 0..3 {
        let create = CreateSession {
            agent_id: agent_a.clone(),
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: None,
        };
        owner.call(create).await.unwrap();
    }
    let page = owner.call(list(None, None, 0)).await.unwrap();
    assert_eq!(page.sessions.len(), 1, "limit 0 is clamped to 1");
    assert!(page.next_cursor.is_some());
    let page = owner.call(list(None, None, 10_000)).await.unwrap();
    assert_eq!(page.sessions.len(), 3);
    assert!(page.next_cursor.is_none());
    assert_eq!(page.agents.iter().map(|agent| agent.id.as_str()).collect::<Vec<_>>(), vec![agent_a.as_str()]);
    server.stop().await;
}
