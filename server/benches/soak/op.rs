//! The actions a soak worker performs: the rows of the report, in order.

/// What a worker can do, and the rows of the report (in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    ListAgents,
    GetAgent,
    GetSession,
    ListSessions,
    ReadMemory,
    CreateSession,
    CreateSessionKeyed,
    CreateSessionReplay,
    WriteMemory,
    DeleteMemory,
    Upload,
    VerbWrite,
    VerbRead,
}

impl Op {
    pub const ALL: [Op; 13] = [
        Op::ListAgents,
        Op::GetAgent,
        Op::GetSession,
        Op::ListSessions,
        Op::ReadMemory,
        Op::CreateSession,
        Op::CreateSessionKeyed,
        Op::CreateSessionReplay,
        Op::WriteMemory,
        Op::DeleteMemory,
        Op::Upload,
        Op::VerbWrite,
        Op::VerbRead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::ListAgents => "ListAgents",
            Op::GetAgent => "GetAgent",
            Op::GetSession => "GetSession afterSeq",
            Op::ListSessions => "ListSessions",
            Op::ReadMemory => "ReadAgentMemoryFile",
            Op::CreateSession => "CreateSession",
            Op::CreateSessionKeyed => "CreateSession keyed",
            Op::CreateSessionReplay => "CreateSession replay",
            Op::WriteMemory => "WriteAgentMemoryFile",
            Op::DeleteMemory => "DeleteAgentMemoryFile",
            Op::Upload => "upload 1-4 MiB",
            Op::VerbWrite => "InvokeSessionTool write",
            Op::VerbRead => "InvokeSessionTool read",
        }
    }

    /// Envelopes of one such action the server's replay guard remembers for the timestamp window:
    /// writes without a `clientRequestId` (an upload here is a begin, one chunk — all are under
    /// the 8 MiB chunk size — and a commit).
    pub fn guarded_envelopes(self) -> u64 {
        match self {
            Op::CreateSession | Op::WriteMemory | Op::DeleteMemory | Op::VerbWrite | Op::VerbRead => 1,
            Op::Upload => 3,
            Op::ListAgents
            | Op::GetAgent
            | Op::GetSession
            | Op::ListSessions
            | Op::ReadMemory
            | Op::CreateSessionKeyed
            | Op::CreateSessionReplay => 0,
        }
    }

    /// The op's row in a [`Tally`].
    pub fn index(self) -> usize {
        self as usize
    }
}
