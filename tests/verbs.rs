//! `InvokeSessionTool`: user verbs over memory, `~/self`, attachments and threads, the errors that
//! come back in `error` versus those that fail the request, and the durable events each call
//! appends (read back through `GetSession`), and the refusal while an agent turn holds the
//! session (run rows written straight into the live database).

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AcceptAgentInvite, AgentCollaboratorRole, DeleteAgent, DeleteSession, GetSession, InviteAgentCollaborator,
    InvokeSessionTool, InvokeSessionToolResponse, InvokeSessionToolVerb, ReadAgentMemoryFile, SessionActor,
    SessionEventPayload, UploadSessionAttachment,
};
use seed_agents_protocol::{Bytes, Value};
use seed_agents_server::testing::bus::{ChangeReason, Event};
use seed_agents_server::testing::db::ToSql;

use crate::support::db::{EMPTY_MAP, read_db, write_db};
use crate::support::{TestServer, User, action_map, api_error, error_body, now_ms};

fn map(fields: &[(&str, Ipld)]) -> Value {
    Value(Ipld::Map(fields.iter().map(|(key, value)| ((*key).to_owned(), value.clone())).collect()))
}

fn text(value: &str) -> Ipld {
    Ipld::String(value.to_owned())
}

fn invoke(session_id: &str, verb: InvokeSessionToolVerb, input: Value) -> InvokeSessionTool {
    InvokeSessionTool { input, session_id: session_id.into(), verb }
}

fn read(session_id: &str, address: &str) -> InvokeSessionTool {
    invoke(session_id, InvokeSessionToolVerb::Read, map(&[("address", text(address))]))
}

fn write(session_id: &str, address: &str, content: &str) -> InvokeSessionTool {
    invoke(session_id, InvokeSessionToolVerb::Write, map(&[("address", text(address)), ("content", text(content))]))
}

/// A field of the response's output map.
fn field<'a>(response: &'a InvokeSessionToolResponse, key: &str) -> &'a Ipld {
    let Some(Ipld::Map(fields)) = response.output.as_ref().map(Value::as_ipld) else {
        panic!("no output map: {response:?}")
    };
    fields.get(key).unwrap_or_else(|| panic!("no {key} in {fields:?}"))
}

fn field_text<'a>(response: &'a InvokeSessionToolResponse, key: &str) -> &'a str {
    match field(response, key) {
        Ipld::String(text) => text,
        other => panic!("{key} is not a string: {other:?}"),
    }
}

async fn member(server: &TestServer, owner: &User, agent_id: &str, role: AgentCollaboratorRole) -> User {
    let user = server.user();
    let invite = InviteAgentCollaborator { agent_id: agent_id.into(), account_id: user.id.clone(), role };
    owner.call(invite).await.unwrap();
    user.call(AcceptAgentInvite { agent_id: agent_id.into() }).await.unwrap();
    user
}

#[tokio::test]
async fn memory_is_written_and_read_through_verbs() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Verbs").await;
    let session_id = owner.create_session(&agent, Some("Work")).await;
    let app = server.server.as_ref().unwrap().app().clone();
    let mut bus = app.bus.subscribe();

    let written = owner.call(write(&session_id, "~/memory/notes/todo.md", "- ship\n")).await.unwrap();
    assert_eq!(written.error, None);
    assert_eq!(written.session_id, session_id);
    assert_eq!(field_text(&written, "summary"), "Wrote notes/todo.md (7 bytes).");
    assert_eq!(field_text(&written, "path"), "notes/todo.md");
    let memory_event = bus.recv().await.unwrap();
    assert_eq!(
        *memory_event,
        Event::AccountChange {
            account_id: owner.id.to_string(),
            reason: ChangeReason::AgentMemoryChanged,
            agent_id: Some(agent.to_string()),
            session_id: None,
        }
    );
    let mut reasons = Vec::new();
    for _ in 0..3 {
        reasons.push((*bus.recv().await.unwrap()).clone());
    }
    // An append is announced as an append (and `session-event`), not as a session change.
    assert!(reasons.iter().any(|event| matches!(event,
        Event::SessionAppended { agent_id, event, .. } if *agent_id == agent && event.session_id == session_id)));
    assert!(reasons.iter().any(|event| matches!(event,
        Event::AccountChange { reason: ChangeReason::SessionEvent, session_id: Some(id), .. } if *id == session_id)));

    let file = owner.call(ReadAgentMemoryFile { agent_id: agent.clone(), path: "notes/todo.md".into() }).await.unwrap();
    assert_eq!(file.file.content.as_deref(), Some("- ship\n"));

    let read_back = owner.call(read(&session_id, "~/memory/notes/todo.md")).await.unwrap();
    assert_eq!(field_text(&read_back, "content"), "- ship\n");
    assert_eq!(field_text(&read_back, "summary"), "Read notes/todo.md (7 bytes).");
    let listing = owner.call(read(&session_id, "~/memory/")).await.unwrap();
    assert_eq!(
        field_text(&listing, "summary"),
        "Memory root holds 0 files (0 bytes) and 1 directory (read a directory address to look inside)."
    );
    let dir = owner.call(read(&session_id, "~/memory/notes")).await.unwrap();
    assert_eq!(field_text(&dir, "path"), "notes", "a directory read without a slash lists it");
    let Ipld::List(entries) = field(&dir, "entries") else { panic!("entries") };
    assert_eq!(entries.len(), 1);

    let missing = owner.call(read(&session_id, "~/memory/nope.md")).await.unwrap();
    assert_eq!(missing.error.as_deref(), Some("Memory file not found: nope.md"));
    let escape = owner.call(write(&session_id, "~/memory/../x", "x")).await.unwrap();
    assert_eq!(escape.error.as_deref(), Some("Memory path cannot contain \"..\""));
}

#[tokio::test]
async fn self_attachment_and_thread_addresses() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Selfie").await;
    let session_id = owner.create_session(&agent, Some("Main")).await;
    let other = owner.create_session(&agent, Some("Elsewhere")).await;

    let me = owner.call(read(&session_id, "~/self")).await.unwrap();
    assert_eq!(me.error, None);
    assert!(field_text(&me, "summary").starts_with("You are \"Selfie\""), "{me:?}");
    assert_eq!(field_text(&me, "agentId"), agent);
    assert_eq!(field(&me, "sessionCount"), &Ipld::Integer(2));
    // The provider the definition names is found (by name) and shown with its id and type.
    let Ipld::Map(provider) = field(&me, "modelProvider") else { panic!("modelProvider is a map: {me:?}") };
    assert_eq!(provider.get("name"), Some(&Ipld::String("main".into())));
    assert_eq!(provider.get("type"), Some(&Ipld::String("openai".into())));
    let refused = owner.call(write(&session_id, "~/self", "x")).await.unwrap();
    assert!(refused.error.as_deref().unwrap().starts_with("Unrecognized write address: ~/self"), "{refused:?}");
    assert_eq!(refused.output, None);

    let upload = UploadSessionAttachment {
        session_id: session_id.clone(),
        name: "notes.txt".into(),
        mime_type: None,
        content: Bytes(b"attached words".to_vec()),
    };
    let attachment = owner.call(upload).await.unwrap().attachment;
    let shown = owner.call(read(&session_id, &format!("attachment:{}", attachment.id))).await.unwrap();
    assert_eq!(field_text(&shown, "content"), "attached words");
    assert_eq!(field_text(&shown, "name"), "notes.txt");
    let absent = owner.call(read(&other, &format!("attachment:{}", attachment.id))).await.unwrap();
    assert!(absent.error.is_some(), "attachments are private to their session: {absent:?}");

    owner.call(read(&other, "~/self")).await.unwrap();
    let thread = owner.call(read(&session_id, &format!("thread:{other}"))).await.unwrap();
    assert_eq!(field_text(&thread, "summary"), "Thread \"Elsewhere\": 4 recent events.");
    assert_eq!(field_text(&thread, "markdown"), ["→ tool call read", "← tool result read"].repeat(2).join("\n\n"));
    let unknown = owner.call(read(&session_id, "thread:not-a-session")).await.unwrap();
    assert_eq!(unknown.error.as_deref(), Some("No thread not-a-session"));
    let foreign_agent = owner.create_agent("Other").await;
    let foreign = owner.create_session(&foreign_agent, Some("Foreign")).await;
    let hidden = owner.call(read(&session_id, &format!("thread:{foreign}"))).await.unwrap();
    assert_eq!(hidden.error, Some(format!("No thread {foreign}")), "only the same agent's threads");
}

#[tokio::test]
async fn execution_errors_come_back_in_error_and_pre_checks_fail() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Errors").await;
    let session_id = owner.create_session(&agent, Some("E")).await;

    let unknown = owner.call(read(&session_id, "gopher://x")).await.unwrap();
    assert!(unknown.error.as_deref().unwrap().starts_with("Unrecognized address: gopher://x"), "{unknown:?}");
    let no_address = owner.call(invoke(&session_id, InvokeSessionToolVerb::Read, map(&[]))).await.unwrap();
    assert_eq!(no_address.error.as_deref(), Some("read requires an address"));
    // A miss is a successful result with the listing (the contract-on-miss rule).
    let call = invoke(&session_id, InvokeSessionToolVerb::Call, map(&[("tool", text("bash"))]));
    let called = owner.call(call).await.unwrap();
    assert_eq!(called.error, None, "{called:?}");
    assert_eq!(field_text(&called, "summary"), "No callable tool named bash. Here is what you can call.");
    let delegate = invoke(&session_id, InvokeSessionToolVerb::Call, map(&[("tool", text("delegate"))]));
    let delegated = owner.call(delegate).await.unwrap();
    assert_eq!(delegated.error.as_deref(), Some("Delegation is a conversational ask; message the agent instead"));

    for verb in ["delegate", "plan", "execute"] {
        let action = action_map(
            "InvokeSessionTool",
            &[("sessionId", text(&session_id)), ("verb", text(verb)), ("input", Ipld::Map(Default::default()))],
        );
        let bytes = owner.sign_map(action, now_ms(), Some(3)).await;
        let (status, _, body) = server.post_raw("application/cbor", bytes).await;
        assert_eq!((status, error_body(&body).0.as_str()), (400, "verb must be read, write, or call"), "{verb}");
    }

    let reader = member(&server, &owner, &agent, AgentCollaboratorRole::Reader).await;
    assert_eq!(api_error(reader.call(read(&session_id, "~/self")).await), (403, "Write access is required".into()));
    let stranger = server.user();
    assert_eq!(api_error(stranger.call(read(&session_id, "~/self")).await), (404, "Session not found".into()));
    let writer = member(&server, &owner, &agent, AgentCollaboratorRole::Writer).await;
    assert_eq!(writer.call(read(&session_id, "~/self")).await.unwrap().error, None);

    // Four successful invocations above appended two events each; the refused ones appended none.
    let events = owner.call(GetSession { session_id, after_seq: None, before_seq: None, limit: None }).await.unwrap();
    assert_eq!(events.events.iter().map(|event| event.seq).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());
}

#[tokio::test]
async fn each_invocation_appends_a_call_and_its_result() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Log").await;
    let session_id = owner.create_session(&agent, Some("L")).await;

    let first = owner.call(write(&session_id, "~/memory/a.txt", "one")).await.unwrap();
    let second = owner.call(read(&session_id, "~/memory/missing")).await.unwrap();
    assert!(second.error.is_some());
    let get = |after_seq| GetSession { session_id: session_id.clone(), after_seq, before_seq: None, limit: None };
    let all = owner.call(get(None)).await.unwrap().events;
    assert_eq!(all.iter().map(|event| event.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert_eq!(all[1].id, first.result_event_id);
    assert_eq!(all[3].id, second.result_event_id);
    let SessionEventPayload::ToolCallEvent(call) = &all[0].event else { panic!("tool_call: {:?}", all[0].event) };
    assert_eq!((call.name.as_str(), call.actor), ("write", Some(SessionActor::User)));
    assert!(call.id.starts_with("user-"));
    assert_eq!(call.input, map(&[("address", text("~/memory/a.txt")), ("content", text("one"))]));
    let SessionEventPayload::ToolResultEvent(result) = &all[1].event else { panic!("tool_result") };
    assert_eq!((result.tool_call_id.as_str(), result.actor), (call.id.as_str(), Some(SessionActor::User)));
    assert_eq!(result.output, first.output);
    assert_eq!(result.error, None);
    let SessionEventPayload::ToolResultEvent(failed) = &all[3].event else { panic!("tool_result") };
    assert_eq!((failed.error.clone(), failed.output.clone()), (second.error.clone(), None));
    assert_eq!(failed.name, "read");

    let tail = owner.call(get(Some(2))).await.unwrap().events;
    assert_eq!(tail.iter().map(|event| event.seq).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(tail[1].id, second.result_event_id);
}

const AGENT_IS_WORKING: &str = "The agent is working in this thread right now; wait for its turn to finish";

/// Puts run `id` of the agent's session in `status` (inserting it the first time), through the
/// server's own write connection.
async fn set_run(
    server: &TestServer,
    id: &str,
    owner: &User,
    agent_id: &str,
    session_id: &str,
    kind: &str,
    status: &str,
) {
    let row = [id, owner.id.as_str(), kind, agent_id, session_id, status].map(str::to_owned);
    write_db(server, move |conn| {
        let [id, owner, kind, agent_id, session_id, status] = &row;
        conn.execute(
            "INSERT INTO runs (id, account_id, root_run_id, kind, origin, agent_id, session_id, input_cbor, status,
                               queue, created_at, updated_at)
             VALUES (?1, ?2, ?1, ?3, 'user', ?4, ?5, ?7, ?6, 'interactive', 1, 1)
             ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, status = excluded.status",
            &[id as &dyn ToSql, owner, kind, agent_id, session_id, status, &EMPTY_MAP][..],
        )
    })
    .await;
}

/// The run's `(agent_id, session_id)`.
async fn run_owners(server: &TestServer, id: &str) -> (Option<String>, Option<String>) {
    let id = id.to_owned();
    read_db(server, move |conn| {
        conn.query_row("SELECT agent_id, session_id FROM runs WHERE id = ?1", (id,), |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
    })
    .await
}

async fn event_count(user: &User, session_id: &str) -> usize {
    let get = GetSession { session_id: session_id.into(), after_seq: None, before_seq: None, limit: None };
    user.call(get).await.unwrap().events.len()
}

#[tokio::test]
async fn an_agent_turn_holding_the_session_refuses_user_verbs() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Busy").await;
    let session_id = owner.create_session(&agent, Some("Turns")).await;

    // (kind, status, refused): every live agent run holds the session, a parked (`waiting`) one
    // too, as the seed says (upstream counts queued, claimed and running only); workflow runs
    // never hold it.
    let cases = [
        ("agent", "running", true),
        ("agent", "succeeded", false),
        ("agent", "queued", true),
        ("agent", "claimed", true),
        ("agent", "waiting", true),
        ("agent", "failed", false),
        ("workflow", "running", false),
        ("agent", "canceled", false),
    ];
    for (kind, status, refused) in cases {
        set_run(&server, "run-1", &owner, &agent, &session_id, kind, status).await;
        let before = event_count(&owner, &session_id).await;
        let answer = owner.call(read(&session_id, "~/self")).await;
        if refused {
            assert_eq!(api_error(answer), (409, AGENT_IS_WORKING.into()), "{kind} {status}");
            assert_eq!(event_count(&owner, &session_id).await, before, "{kind} {status}: nothing appended");
        } else {
            assert_eq!(answer.unwrap().error, None, "{kind} {status}");
            assert_eq!(event_count(&owner, &session_id).await, before + 2, "{kind} {status}");
        }
    }

    // A refused write changes nothing: the verb never ran.
    set_run(&server, "run-1", &owner, &agent, &session_id, "agent", "running").await;
    let refused = owner.call(write(&session_id, "~/memory/late.md", "x")).await;
    assert_eq!(api_error(refused), (409, AGENT_IS_WORKING.into()));
    let file = owner.call(ReadAgentMemoryFile { agent_id: agent.clone(), path: "late.md".into() }).await;
    assert_eq!(api_error(file).0, 404);
    // Access is decided first: a stranger still sees the session as missing.
    let stranger = server.user();
    assert_eq!(api_error(stranger.call(read(&session_id, "~/self")).await), (404, "Session not found".into()));
    // Another session of the same agent is not held.
    let other = owner.create_session(&agent, Some("Free")).await;
    assert_eq!(owner.call(read(&other, "~/self")).await.unwrap().error, None);
}

#[tokio::test]
async fn runs_outlive_their_session_and_agent() {
    let server = TestServer::start().await;
    let owner = server.user();
    let agent = owner.create_agent("Mortal").await;
    let session_id = owner.create_session(&agent, Some("Gone")).await;
    set_run(&server, "run-1", &owner, &agent, &session_id, "agent", "succeeded").await;

    owner.call(DeleteSession { session_id: session_id.clone() }).await.unwrap();
    assert_eq!(run_owners(&server, "run-1").await, (Some(agent.to_string()), None), "session_id is nulled");
    owner.call(DeleteAgent { agent_id: agent.clone() }).await.unwrap();
    assert_eq!(run_owners(&server, "run-1").await, (None, None), "agent_id is nulled");
}
