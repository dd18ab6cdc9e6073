//! The authorization matrix: every action the server implements × seven kinds of caller, as one
//! table, run by one [`check`] against fresh state per cell (see [`fixture`]).
//!
//! A row names the action (and the variant, when one action has several rows), builds it from
//! the cell's state, and states per caller what must happen: allowed, or refused with the exact
//! status and message of docs/protocol.md §C. Allowed cells also check the answer's type and, where
//! cheap, what it shows this caller. Rows of account-scoped writes also check, after the call,
//! that the owner's own provider or identity was not touched: collaboration never grants them.
//!
//! Not in the table: actions that answer 501, and the account-scoped actions that name nothing of
//! another account, so a role on an agent means nothing to them ([`UNRELATED`]). A routed action
//! in neither list fails the test.

mod fixture;
mod table;

use std::fmt;
use std::sync::Arc;

use seed_agents_protocol::generated::{AgentAccessRole, ListMcpServers, ListModelProviders, ListSigningIdentities};
use seed_agents_protocol::{ActionInfo, AgentResponse};
use seed_agents_sdk::Error;

use fixture::{Cell, Env};
use table::{Expect, OwnerKeeps, Row, UNRELATED, same, table};

/// The kinds of caller, in the table's column order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Owner,
    /// An accepted writer collaborator.
    Writer,
    /// An accepted reader collaborator.
    Reader,
    /// No membership; the agent has public read and public chat on.
    Chatter,
    /// No membership; the agent has public read on, public chat off.
    PublicReader,
    /// Invited as a writer, not accepted yet.
    Invitee,
    /// No relation to the agent at all.
    Stranger,
}

const CALLERS: [Caller; 7] = [
    Caller::Owner,
    Caller::Writer,
    Caller::Reader,
    Caller::Chatter,
    Caller::PublicReader,
    Caller::Invitee,
    Caller::Stranger,
];

impl Caller {
    /// The `accessRole` the server shows this caller on the agent.
    fn access_role(self) -> Option<AgentAccessRole> {
        match self {
            Caller::Owner => Some(AgentAccessRole::Owner),
            Caller::Writer => Some(AgentAccessRole::Writer),
            Caller::Reader | Caller::PublicReader => Some(AgentAccessRole::Reader),
            Caller::Chatter => Some(AgentAccessRole::Chatter),
            Caller::Invitee | Caller::Stranger => None,
        }
    }

    /// Owner or accepted member: the agent is among the caller's own.
    fn is_member(self) -> bool {
        matches!(self, Caller::Owner | Caller::Writer | Caller::Reader)
    }
}

/// Cells run at once.
const CONCURRENT_CELLS: usize = 8;

/// What a cell got.
enum Got {
    Answer(Box<AgentResponse>),
    Refused(u16, String),
    Failed(String),
}

impl fmt::Display for Got {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Got::Answer(answer) => write!(f, "allowed ({})", answer.name()),
            Got::Refused(status, message) => write!(f, "{status} {message:?}"),
            Got::Failed(error) => write!(f, "a failed exchange: {error}"),
        }
    }
}

/// Runs one cell against fresh state; the mismatch, if any, described.
async fn check(env: &Env, row: &Row, caller: Caller, column: usize) -> Result<(), String> {
    let cell = fixture::cell(env, caller, row.staged, row.run).await;
    let action = (row.build)(&cell);
    if action.name() != row.action() {
        return Err(format!("the row builds {}, not {}", action.name(), row.action()));
    }
    let got = match cell.actor.client.send(&action).await {
        Ok(answer) => Got::Answer(Box::new(answer)),
        Err(Error::Api { status, message, .. }) => Got::Refused(status, message),
        Err(other) => Got::Failed(format!("{other:?}")),
    };
    let expected = row.expect[column];
    let mut problems = Vec::new();
    match (expected, &got) {
        (Expect::Allowed, Got::Answer(answer)) => {
            let response_name = ActionInfo::find(row.action()).map(|info| info.response);
            if response_name != Some(answer.name()) {
                problems.push(format!("answered {}, expected {response_name:?}", answer.name()));
            } else if let Some(shape) = row.shape
                && let Err(problem) = shape(&cell, caller, answer)
            {
                problems.push(problem);
            }
        }
        (Expect::Refused(status, message), Got::Refused(got_status, got_message))
            if status == *got_status && message == got_message => {}
        _ => problems.push(format!("expected {expected}, got {got}")),
    }
    if caller != Caller::Owner
        && let Some(kept) = row.owner_keeps
        && let Err(problem) = owner_keeps(&cell, kept).await
    {
        problems.push(format!("afterwards, {problem}"));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// Checks that a non-owner's account-scoped write left the owner's things alone.
async fn owner_keeps(cell: &Cell, kept: OwnerKeeps) -> Result<(), String> {
    let owner = &cell.owner;
    let failed = |error: Error| format!("the owner's check failed: {error:?}");
    match kept {
        OwnerKeeps::MainProvider | OwnerKeeps::SubscriptionProvider => {
            let providers = owner.call(ListModelProviders { agent_id: None }).await.map_err(failed)?.providers;
            let type_of = |name: &str| providers.iter().find(|p| p.name == name).map(|p| p.type_.clone());
            match kept {
                OwnerKeeps::MainProvider => {
                    same("the owner's provider main, of type", type_of("main"), Some("openai".into()))
                }
                _ => same(
                    "the owner's subscription provider kept",
                    type_of(fixture::SUBSCRIPTION_PROVIDER).is_some(),
                    true,
                ),
            }
        }
        OwnerKeeps::McpServer => {
            let servers = owner.call(ListMcpServers {}).await.map_err(failed)?.servers;
            let url = servers.iter().find(|server| server.name == fixture::MCP_SERVER).map(|server| server.url.clone());
            same("the owner's MCP server, at", url, Some(cell.download_url.clone()))
        }
        OwnerKeeps::GrantedIdentity => {
            let identities = owner.call(ListSigningIdentities { agent_id: None }).await.map_err(failed)?.identities;
            let label = identities.iter().find(|identity| identity.name == cell.granted).map(|i| i.label.clone());
            same("the owner's granted identity, labelled", label, Some(Some(fixture::GRANTED_LABEL.to_owned())))
        }
    }
}

/// The actions `server/src/dispatch/mod.rs` routes (the table inside its `routes!` macro).
fn routed_actions() -> Vec<&'static str> {
    let source = include_str!("../../server/src/dispatch/mod.rs");
    let table = source.split_once("$then! {").expect("the routes! table").1;
    let table = table.split_once('}').expect("the end of the routes! table").0;
    table.lines().filter_map(|line| line.trim().split_once(" => ")).map(|(action, _)| action).collect()
}

fn panic_message(error: tokio::task::JoinError) -> String {
    match error.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|text| (*text).to_owned()))
            .unwrap_or_default(),
        Err(error) => error.to_string(),
    }
}

fn cell_code(expect: Expect) -> String {
    match expect {
        Expect::Allowed => "ok".to_owned(),
        Expect::Refused(status, _) => status.to_string(),
    }
}

/// The whole matrix: 73 rows over 69 routed actions (64 in the table, 5 [`UNRELATED`]) × 7
/// callers = 511 cells, each against fresh state. Every mismatching cell is reported, with the
/// action, the caller, what was expected and what came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix() {
    let rows = table();
    let routed = routed_actions();
    let mut missing: Vec<&str> = routed
        .iter()
        .copied()
        .filter(|action| !UNRELATED.contains(action) && !rows.iter().any(|row| row.action() == *action))
        .collect();
    missing.extend(rows.iter().map(Row::action).filter(|action| !routed.contains(action)));
    assert!(missing.is_empty(), "routed actions without a row, or rows for unrouted actions: {missing:?}");
    let actions = routed.len() - UNRELATED.len();
    let cells = rows.len() * CALLERS.len();
    println!(
        "authorization matrix: {} rows over {actions} actions × {} callers = {cells} cells",
        rows.len(),
        CALLERS.len()
    );
    println!("{:<62} owner writer reader chat pub-r invitee stranger", "");
    for row in &rows {
        let codes: Vec<String> = row.expect.iter().map(|expect| format!("{:>5}", cell_code(*expect))).collect();
        println!("{:<62} {}", row.label, codes.join(" "));
    }
    assert_eq!((rows.len(), actions, cells), (73, 64, 511), "the doc comment states the matrix size; update it");

    let env = Arc::new(Env::start().await);
    let rows = Arc::new(rows);
    let started = std::time::Instant::now();
    // Cells are independent (fresh state each), so a few run at once.
    let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CELLS));
    let mut running = tokio::task::JoinSet::new();
    let mut cell_of = std::collections::HashMap::new();
    for index in 0..rows.len() {
        for (column, caller) in CALLERS.into_iter().enumerate() {
            let (env, rows, slots) = (env.clone(), rows.clone(), slots.clone());
            let task = running.spawn(async move {
                let _slot = slots.acquire().await.expect("semaphore");
                check(&env, &rows[index], caller, column).await
            });
            cell_of.insert(task.id(), (index, column));
        }
    }
    let mut mismatches: Vec<(usize, usize, String)> = Vec::new();
    while let Some(done) = running.join_next_with_id().await {
        let (id, problem) = match done {
            Ok((_, Ok(()))) => continue,
            Ok((id, Err(problem))) => (id, problem),
            // A broken fixture step panics; the cell still gets its line in the report.
            Err(error) => (error.id(), format!("the cell panicked: {}", panic_message(error))),
        };
        let (index, column) = cell_of[&id];
        mismatches.push((index, column, format!("{} as {:?}: {problem}", rows[index].label, CALLERS[column])));
    }
    mismatches.sort();
    println!("{cells} cells in {:.1} s", started.elapsed().as_secs_f64());
    let report: Vec<String> = mismatches.into_iter().map(|(_, _, problem)| problem).collect();
    assert!(report.is_empty(), "{} of {cells} cells mismatch:\n{}", report.len(), report.join("\n"));
    Arc::into_inner(env).expect("every cell finished").stop().await;
}
