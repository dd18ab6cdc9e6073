//! What one soak worker does: its two accounts (the agent's owner and a writer collaborator),
//! the weighted mix of actions it draws from, and the requests each action sends (with the few
//! checks that tell a wrong answer from a right one).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{
    AcceptAgentInvite, AgentCollaboratorRole, CreateAgent, CreateSession, DeleteAgentMemoryFile, FileUploadTarget,
    GetAgent, GetSession, InviteAgentCollaborator, InvokeSessionTool, InvokeSessionToolVerb, ListAgents, ListSessions,
    MemoryUploadTarget, ReadAgentMemoryFile, SetModelProvider, WriteAgentMemoryFile, WriteAgentMemoryFileContent,
};
use seed_agents_protocol::{AgentId, Bytes, SessionId, Value};
use seed_agents_sdk::{Client, Ed25519Signer};
use seed_agents_test_support::fixtures::{definition, provider_config};

use super::live::{self, Live};
use super::op::Op;
use super::report::{Failure, Recorder, Shared};

/// The dice, in thousandths. `CreateSessionReplay` is not drawn: it follows every keyed create.
/// Uploads are rare because each writes and fsyncs megabytes.
const MIX: [(Op, u32); 12] = [
    (Op::ListAgents, 80),
    (Op::GetAgent, 80),
    (Op::GetSession, 140),
    (Op::ListSessions, 80),
    (Op::ReadMemory, 80),
    (Op::CreateSession, 50),
    (Op::CreateSessionKeyed, 30),
    (Op::WriteMemory, 120),
    (Op::DeleteMemory, 45),
    (Op::Upload, 5),
    (Op::VerbWrite, 145),
    (Op::VerbRead, 145),
];

/// Memory files `soak/slot-<n>.bin` a worker rotates through, so its disk use stays bounded.
const SLOTS: usize = 8;

/// The largest upload; a worker's payload buffer is this long.
const MAX_UPLOAD: usize = 4 << 20;

/// A small seeded generator (SplitMix64): the same seed draws the same sequence of actions.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: usize, high: usize) -> usize {
        low + (self.next() % (high - low + 1) as u64) as usize
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }

    /// An op drawn by the weights of [`MIX`].
    fn op(&mut self) -> Op {
        let total: u32 = MIX.iter().map(|(_, weight)| weight).sum();
        let mut roll = (self.next() % u64::from(total)) as u32;
        for (op, weight) in MIX {
            if roll < weight {
                return op;
            }
            roll -= weight;
        }
        unreachable!("the roll is below the sum of the weights")
    }
}

/// One worker: an account with a provider, an agent and a session, a second account that is a
/// writer on that agent, and what it has written.
pub struct Worker {
    pub index: usize,
    /// The agent's owner: does every memory write, delete and upload (so the slots' sizes are
    /// known), and half of the other actions.
    pub client: Client,
    /// A writer collaborator: the other half of the reads, creates and verbs, and the session's
    /// WebSocket subscription.
    pub member: Client,
    pub agent_id: AgentId,
    pub session_id: SessionId,
    rng: Rng,
    /// The size of each `soak/slot-<n>.bin` this worker wrote and has not deleted since (only
    /// its owner account writes those files, so this is what the server must have).
    slots: [Option<usize>; SLOTS],
    /// Bytes that memory writes and uploads are cut from.
    payload: Arc<[u8]>,
    /// Numbers the `clientRequestId`s of keyed creates.
    keyed: u64,
    /// What its subscriber has seen (the last `seq` feeds `GetSession`'s `afterSeq`).
    pub live: Arc<Live>,
    /// The subscriber's task (abort it to close the socket).
    pub follower: tokio::task::JoinHandle<()>,
    pub recorder: Recorder,
}

/// The file every worker writes once and reads when none of its slots holds anything.
const NOTES: &str = "soak/notes.md";

impl Worker {
    /// Makes the two accounts (fresh keys), the owner's provider, agent, session and
    /// `soak/notes.md`, makes the second account a writer, and starts its subscription.
    pub async fn setup(index: usize, seed: u64, http: &reqwest::Client, addr: SocketAddr, shared: Arc<Shared>) -> Self {
        let account = || {
            let signer = Ed25519Signer::generate().expect("a fresh Ed25519 key");
            Client::builder(&format!("http://{addr}"), signer).http_client(http.clone()).build().expect("an SDK client")
        };
        let (client, member) = (account(), account());
        let provider = SetModelProvider { name: "main".into(), provider: provider_config() };
        client.set_model_provider(provider).await.expect("setup: SetModelProvider");
        let definition = definition(&format!("Soak {index}"));
        let created = client.create_agent(CreateAgent { client_request_id: None, definition }).await;
        let agent_id = created.expect("setup: CreateAgent").agent_id;
        let invite = InviteAgentCollaborator {
            account_id: member.account().into(),
            agent_id: agent_id.clone(),
            role: AgentCollaboratorRole::Writer,
        };
        client.invite_agent_collaborator(invite).await.expect("setup: InviteAgentCollaborator");
        let accept = AcceptAgentInvite { agent_id: agent_id.clone() };
        member.accept_agent_invite(accept).await.expect("setup: AcceptAgentInvite");
        let created = client.create_session(create_session(&agent_id, None)).await;
        let session_id = created.expect("setup: CreateSession").session_id;
        let notes = WriteAgentMemoryFileContent::String("# Notes\n\nKept for the soak's reads.\n".into());
        let write = WriteAgentMemoryFile { agent_id: agent_id.clone(), content: notes, path: NOTES.into() };
        client.write_agent_memory_file(write).await.expect("setup: WriteAgentMemoryFile");
        let live = Arc::new(Live::default());
        let follower = live::follow(&member, &session_id, live.clone());
        let mut rng = Rng::new(seed ^ (index as u64).wrapping_mul(0x1000_0000_01b3));
        let mut payload = vec![0u8; MAX_UPLOAD];
        payload.iter_mut().for_each(|byte| *byte = rng.next() as u8);
        Worker {
            index,
            client,
            member,
            agent_id,
            session_id,
            rng,
            slots: [None; SLOTS],
            payload: payload.into(),
            keyed: 0,
            live,
            follower,
            recorder: Recorder::new(shared),
        }
    }

    /// Draws and performs actions, one at a time, until `deadline`.
    pub async fn run(mut self, deadline: Instant) -> Self {
        while Instant::now() < deadline {
            let op = self.rng.op();
            self.perform(op).await;
        }
        self
    }

    async fn perform(&mut self, op: Op) {
        match op {
            Op::ListAgents => self.list_agents().await,
            Op::GetAgent => self.get_agent().await,
            Op::GetSession => self.get_session().await,
            Op::ListSessions => self.list_sessions().await,
            Op::ReadMemory => self.read_memory().await,
            Op::CreateSession => self.create_session().await,
            Op::CreateSessionKeyed | Op::CreateSessionReplay => self.create_session_keyed().await,
            Op::WriteMemory => self.write_memory().await,
            Op::DeleteMemory => self.delete_memory().await,
            Op::Upload => self.upload().await,
            Op::VerbWrite => self.verb_write().await,
            Op::VerbRead => self.verb_read().await,
        }
    }

    /// The owner or the writer collaborator, at random.
    fn anyone(&mut self) -> Client {
        if self.rng.coin() { self.client.clone() } else { self.member.clone() }
    }

    async fn list_agents(&mut self) {
        let client = self.anyone();
        let call = client.list_agents(ListAgents {});
        self.recorder.timed(Op::ListAgents, call).await;
    }

    async fn get_agent(&mut self) {
        let client = self.anyone();
        let call = client.get_agent(GetAgent { agent_id: self.agent_id.clone() });
        self.recorder.timed(Op::GetAgent, call).await;
    }

    /// The session's events after a point a little before what the subscriber last saw (at
    /// most 50, so the answer does not grow with the session).
    async fn get_session(&mut self) {
        let after_seq = (self.live.last_seq() - 10).max(0);
        let session_id = self.session_id.clone();
        let read = GetSession { after_seq: Some(after_seq), before_seq: None, limit: Some(50), session_id };
        let client = self.anyone();
        let call = client.get_session(read);
        self.recorder.timed(Op::GetSession, call).await;
    }

    async fn list_sessions(&mut self) {
        let list = ListSessions {
            agent_id: Some(self.agent_id.clone()),
            cursor: None,
            exclude_triggered: None,
            include_children: None,
            limit: Some(20),
            parent_session_id: None,
        };
        let client = self.anyone();
        let call = client.list_sessions(list);
        self.recorder.timed(Op::ListSessions, call).await;
    }

    /// Reads a slot this worker wrote (its size is checked), or the notes when none is left.
    async fn read_memory(&mut self) {
        let written: Vec<(usize, usize)> =
            self.slots.iter().enumerate().filter_map(|(slot, size)| size.map(|size| (slot, size))).collect();
        let (path, expected) = match written.len() {
            0 => (NOTES.to_owned(), None),
            count => {
                let (slot, size) = written[self.rng.between(0, count - 1)];
                (slot_path(slot), Some(size))
            }
        };
        let (client, agent_id) = (self.anyone(), self.agent_id.clone());
        let call = async move {
            let file = client.read_agent_memory_file(ReadAgentMemoryFile { agent_id, path }).await?;
            match expected {
                Some(size) if file.file.size != size as i64 => Err(Failure::Wrong(format!(
                    "{} holds {} bytes, {size} were written",
                    file.file.path, file.file.size
                ))),
                _ => Ok(()),
            }
        };
        self.recorder.timed(Op::ReadMemory, call).await;
    }

    async fn create_session(&mut self) {
        let client = self.anyone();
        let call = client.create_session(create_session(&self.agent_id, None));
        self.recorder.timed(Op::CreateSession, call).await;
    }

    /// Creates with a `clientRequestId`, then sends the same create again: the answer must be
    /// the same session (the idempotent replay).
    async fn create_session_keyed(&mut self) {
        self.keyed += 1;
        let key = format!("soak-{}-{}", self.index, self.keyed);
        let client = self.anyone();
        let call = client.create_session(create_session(&self.agent_id, Some(key.clone())));
        let Some(first) = self.recorder.timed(Op::CreateSessionKeyed, call).await else { return };
        let again = create_session(&self.agent_id, Some(key));
        let call = async move {
            let second = client.create_session(again).await?;
            match second.session_id == first.session_id {
                true => Ok(()),
                false => Err(Failure::Wrong(format!(
                    "replay made session {} instead of {}",
                    second.session_id, first.session_id
                ))),
            }
        };
        self.recorder.timed(Op::CreateSessionReplay, call).await;
    }

    /// 1-64 KiB of bytes into one of the slots.
    async fn write_memory(&mut self) {
        let slot = self.rng.between(0, SLOTS - 1);
        let size = self.rng.between(1 << 10, 64 << 10);
        let start = self.rng.between(0, self.payload.len() - size);
        let content = WriteAgentMemoryFileContent::Bytes(Bytes(self.payload[start..start + size].to_vec()));
        let write = WriteAgentMemoryFile { agent_id: self.agent_id.clone(), content, path: slot_path(slot) };
        let call = self.client.write_agent_memory_file(write);
        // A failed write leaves either file behind: forget the slot rather than guess.
        self.slots[slot] = self.recorder.timed(Op::WriteMemory, call).await.map(|_| size);
    }

    /// Deletes a slot, written or not; a written one must answer `deleted: true`.
    async fn delete_memory(&mut self) {
        let slot = self.rng.between(0, SLOTS - 1);
        let expected = self.slots[slot].take().is_some();
        self.delete(slot_path(slot), expected).await;
    }

    async fn delete(&mut self, path: String, expected: bool) {
        let (client, agent_id) = (self.client.clone(), self.agent_id.clone());
        let call = async move {
            match client.delete_agent_memory_file(DeleteAgentMemoryFile { agent_id, path }).await? {
                answer if expected && !answer.deleted => {
                    Err(Failure::Wrong(format!("{}: deleted false for a written file", answer.path)))
                }
                _ => Ok(()),
            }
        };
        self.recorder.timed(Op::DeleteMemory, call).await;
    }

    /// 1-4 MiB through `Client::upload` into memory (begin, chunks, commit), then deleted.
    async fn upload(&mut self) {
        let size = self.rng.between(1 << 20, MAX_UPLOAD);
        let path = "soak/upload.bin";
        let target = FileUploadTarget::MemoryUploadTarget(MemoryUploadTarget {
            extra: Default::default(),
            agent_id: self.agent_id.clone(),
            path: path.into(),
        });
        let (client, payload) = (self.client.clone(), self.payload.clone());
        let mut chunks = 0;
        let call = client.upload(target, size as u64, &payload[..size], |_| chunks += 1);
        let done = self.recorder.timed(Op::Upload, call).await;
        // `timed` counted one request of the begin, the chunks and the commit.
        self.recorder.count_requests(chunks + 1);
        self.delete(path.to_owned(), done.is_some()).await;
    }

    /// `write ~/memory/soak/verb-<n>.md` with 64 B to 4 KiB of text: two durable events.
    async fn verb_write(&mut self) {
        let address = format!("~/memory/soak/verb-{}.md", self.rng.between(0, 3));
        let content = "soak ".repeat(self.rng.between(13, 820));
        let client = self.anyone();
        let call = verb(&client, &self.session_id, InvokeSessionToolVerb::Write, address, Some(content));
        self.recorder.timed(Op::VerbWrite, call).await;
    }

    /// `read ~/self` or `read ~/memory/soak/notes.md`: two durable events.
    async fn verb_read(&mut self) {
        let address = if self.rng.coin() { "~/self".to_owned() } else { format!("~/memory/{NOTES}") };
        let client = self.anyone();
        let call = verb(&client, &self.session_id, InvokeSessionToolVerb::Read, address, None);
        self.recorder.timed(Op::VerbRead, call).await;
    }
}

fn create_session(agent_id: &str, client_request_id: Option<String>) -> CreateSession {
    CreateSession {
        agent_id: agent_id.into(),
        client_request_id,
        model_override: None,
        thoroughness: None,
        title: None,
    }
}

fn slot_path(slot: usize) -> String {
    format!("soak/slot-{slot}.bin")
}

/// A user verb; a verb that ran but failed (its `error`, with HTTP 200) is a failure too.
async fn verb(
    client: &Client,
    session_id: &str,
    verb: InvokeSessionToolVerb,
    address: String,
    content: Option<String>,
) -> Result<(), Failure> {
    let mut input = vec![("address".to_owned(), Ipld::String(address))];
    input.extend(content.map(|content| ("content".to_owned(), Ipld::String(content))));
    let invoke =
        InvokeSessionTool { input: Value(Ipld::Map(input.into_iter().collect())), session_id: session_id.into(), verb };
    let answer = client.invoke_session_tool(invoke).await?;
    answer.error.map_or(Ok(()), |error| Err(Failure::Wrong(format!("the verb failed: {error}"))))
}
