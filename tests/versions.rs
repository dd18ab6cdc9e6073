//! Version skew: the same request from clients of protocol 1, 2 and 3 gets each its shape;
//! undeclared or nonsense versions are protocol 1; a raised minimum answers 426.

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{CreateSession, ListAgents};
use seed_agents_protocol::wire;

use crate::support::{TestServer, action_map, error_body, now_ms};

/// The decoded answer to `GetAgent` signed with `protocol` set to `declared` (None = absent).
async fn get_agent(server: &TestServer, user: &crate::support::User, agent_id: &str, declared: Option<Ipld>) -> Ipld {
    let action = action_map("GetAgent", &[("agentId", Ipld::String(agent_id.into()))]);
    let mut bytes = user.sign_map(action.clone(), now_ms(), None).await;
    if let Some(declared) = declared {
        // Sign an envelope carrying this exact `protocol` value.
        let Ipld::Map(mut envelope) = wire::decode_ipld(&bytes).unwrap() else { panic!("map") };
        envelope.insert("protocol".into(), declared);
        envelope.insert("sig".into(), Ipld::Bytes(vec![0; 64]));
        let unsigned = wire::ipld_to_vec(&Ipld::Map(envelope.clone())).unwrap();
        let key = ed25519_dalek::SigningKey::from_bytes(&user.signer.seed());
        let signature = ed25519_dalek::Signer::sign(&key, &unsigned).to_bytes();
        envelope.insert("sig".into(), Ipld::Bytes(signature.to_vec()));
        bytes = wire::ipld_to_vec(&Ipld::Map(envelope)).unwrap();
    }
    let (status, _, body) = server.post_raw("application/cbor", bytes).await;
    assert_eq!(status, 200, "{:?}", error_body(&body));
    wire::decode_ipld(&body).unwrap()
}

fn keys(value: &Ipld) -> Vec<String> {
    match value {
        Ipld::Map(map) => map.keys().cloned().collect(),
        other => panic!("not a map: {other:?}"),
    }
}

fn field<'a>(value: &'a Ipld, key: &str) -> &'a Ipld {
    match value {
        Ipld::Map(map) => &map[key],
        other => panic!("not a map: {other:?}"),
    }
}

#[tokio::test]
async fn get_agent_has_the_shape_of_each_protocol() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent_id = owner.create_agent("Versions").await;
    let mut top_level = Vec::new();
    for index in 0..3 {
        let create = CreateSession {
            agent_id: agent_id.clone(),
            client_request_id: None,
            model_override: None,
            thoroughness: None,
            title: Some(format!("s{index}")),
        };
        top_level.push(owner.call(create).await.unwrap().session_id);
    }
    // One child session: protocol 1 lists only top-level sessions.
    let child = top_level[0].clone();
    let parent = top_level[1].clone();
    let app = server.server.as_ref().unwrap().app().clone();
    app.db
        .write(move |conn| {
            conn.execute(
                "UPDATE sessions SET parent_session_id = ?1 WHERE id = ?2",
                [parent.as_str(), child.as_str()],
            )?;
            Ok(())
        })
        .await
        .unwrap();

    for declared in
        [None, Some(Ipld::Integer(1)), Some(Ipld::Integer(0)), Some(Ipld::Integer(-4)), Some(Ipld::String("3".into()))]
    {
        let answer = get_agent(&server, &owner, &agent_id, declared.clone()).await;
        assert_eq!(keys(&answer), ["_", "agent", "sessions"], "protocol {declared:?} is read as 1");
        let Ipld::List(sessions) = field(&answer, "sessions") else { panic!("sessions is a list") };
        let ids: Vec<_> = sessions
            .iter()
            .map(|session| match field(session, "id") {
                Ipld::String(id) => id.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        let mut expected = vec![top_level[2].clone(), top_level[1].clone()];
        expected.sort_by(|a, b| b.cmp(a));
        let mut got = ids.clone();
        got.sort_by(|a, b| b.cmp(a));
        assert_eq!(got, expected, "top-level sessions only");
    }
    for declared in [2, 3, 4] {
        let answer = get_agent(&server, &owner, &agent_id, Some(Ipld::Integer(declared))).await;
        assert_eq!(keys(&answer), ["_", "agent", "sessionCount"], "protocol {declared}");
        assert_eq!(field(&answer, "sessionCount"), &Ipld::Integer(3));
    }
    server.stop().await;
}

#[tokio::test]
async fn compound_trigger_actions_need_a_newer_app() {
    let server = TestServer::start().await;
    let user = server.user();
    let combine = action_map(
        "CombineAgentTriggers",
        &[
            ("triggerId", Ipld::String("t1".into())),
            ("otherTriggerId", Ipld::String("t2".into())),
            ("expectedUpdatedAt", Ipld::Integer(1)),
            ("otherExpectedUpdatedAt", Ipld::Integer(1)),
        ],
    );
    for (protocol, code) in [(Some(2), Some("update_required")), (None, None)] {
        let bytes = user.sign_map(combine.clone(), now_ms(), protocol).await;
        let (status, _, body) = server.post_raw("application/cbor", bytes).await;
        let (message, got_code) = error_body(&body);
        assert_eq!(status, 426, "{message}");
        assert!(message.contains("Update the app"), "{message}");
        assert_eq!(got_code.as_deref(), code, "protocol 1 errors carry no code");
    }
    // A protocol 3 client reaches the action itself (the triggers do not exist).
    let bytes = user.sign_map(combine, now_ms(), Some(3)).await;
    let (status, _, body) = server.post_raw("application/cbor", bytes).await;
    assert_eq!((status, error_body(&body).0), (404, "Agent trigger not found".to_owned()));
    server.stop().await;
}

#[tokio::test]
async fn a_raised_minimum_answers_426_protocol_too_old() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(dir, |config| config.min_client_protocol = 2).await;
    let user = server.user();
    let bytes = user.sign_map(action_map("ListAgents", &[]), now_ms(), None).await;
    let (status, headers, body) = server.post_raw("application/cbor", bytes).await;
    assert_eq!(status, 426);
    assert_eq!(headers.get("x-agents-protocol").unwrap(), "3");
    let (message, code) = error_body(&body);
    assert_eq!(code.as_deref(), Some("protocol_too_old"), "kept even for a protocol 1 client: {message}");
    // The SDK (protocol 3) is still served, and reports the refusal class when it happens.
    assert!(user.call(ListAgents {}).await.is_ok());
    let version = server.http.get(format!("{}/api/version", server.url)).send().await.unwrap();
    let version: serde_json::Value = serde_json::from_slice(&version.bytes().await.unwrap()).unwrap();
    assert_eq!((version["protocol"].as_u64(), version["minClientProtocol"].as_u64()), (Some(3), Some(2)));
    let old = seed_agents_sdk::Client::builder(
        &server.url,
        seed_agents_protocol::Ed25519Signer::from_seed(&user.signer.seed()),
    )
    .protocol(Some(1))
    .build()
    .unwrap();
    let error = old.call(ListAgents {}).await.unwrap_err();
    assert!(matches!(error, seed_agents_sdk::Error::ProtocolTooOld { .. }), "{error:?}");
    server.stop().await;
}
