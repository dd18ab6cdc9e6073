//! The action table: which response each action answers with, under which name, and whether the
//! action changes state.
//!
//! The implementations are generated (one per action, from the schema's `x-response` and
//! `x-effect`); the SDK's typed calls and the server's dispatch are built on this trait.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// One signed action of the protocol.
pub trait Action: Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The wire name (`_`) of the action.
    const NAME: &'static str;
    /// The protocol version the action appeared in.
    const SINCE: u32;
    /// Whether the action may be sent over HTTP (`Subscribe` is WebSocket-only).
    const HTTP: bool;
    /// Whether the action only reads or changes state (the schema's `x-effect`).
    const EFFECT: Effect;
    /// The action's idempotency key field (`clientRequestId` or `clientMessageId`), when it has
    /// one: a write carrying it is answered once however often it is sent, so a client may send
    /// it again after a transport failure.
    const IDEMPOTENCY_KEY: Option<&'static str> = None;
    /// The response a server answers with.
    type Response: Response;

    /// Wraps the action in the [`crate::AgentAction`] enum.
    fn into_action(self) -> crate::AgentAction;
}

/// One success response of the protocol.
pub trait Response: Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The wire name (`_`) of the response.
    const NAME: &'static str;

    /// Takes this response out of the [`crate::AgentResponse`] enum, when it is this one.
    fn from_response(response: crate::AgentResponse) -> Option<Self>;

    /// Wraps this response in the [`crate::AgentResponse`] enum (which adds the `_` tag).
    fn into_response(self) -> crate::AgentResponse;
}

/// One row of the action table, as data (see [`crate::generated::ACTIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionInfo {
    /// The wire name (`_`).
    pub name: &'static str,
    /// The response name; empty for WebSocket-only actions, which answer with frames.
    pub response: &'static str,
    /// The protocol version the action appeared in.
    pub since: u32,
    /// Whether the action may be sent over HTTP.
    pub http: bool,
    /// Whether the action only reads or changes state.
    pub effect: Effect,
}

/// What an action does to the server's state, as the schema's `x-effect` states it.
///
/// Every action states one. A server may treat reads more freely than writes: ours answers a
/// byte-identical replay of a read again instead of refusing it, because a replayed read changes
/// nothing (over HTTP; a WebSocket `Subscribe` is always guarded, see `schema/PROTOCOL.md`).
///
/// ```
/// use seed_agents_protocol::action::{Action, Effect};
/// use seed_agents_protocol::generated::{CreateAgent, ListAgents};
///
/// assert_eq!(ListAgents::EFFECT, Effect::Read);
/// assert_eq!(CreateAgent::EFFECT, Effect::Write);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Changes no state: lists, gets and reads (`ListAgents`, `GetSession`).
    Read,
    /// May change state, start work or publish (`CreateAgent`, `MessageSession`); when in doubt,
    /// an action is a write.
    Write,
}

impl Effect {
    /// The schema's spelling: `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::Write => "write",
        }
    }
}

/// Typed work on the action a wire name (`_`) names, for code that holds only the name at run
/// time: [`crate::AgentAction::visit`] calls [`ActionVisitor::visit`] with the action's generated
/// type. Every action has one, WebSocket-only ones included (which have no [`Action`] impl).
///
/// ```
/// use seed_agents_protocol::AgentAction;
/// use seed_agents_protocol::action::ActionVisitor;
///
/// struct TypeName;
/// impl ActionVisitor for TypeName {
///     type Output = &'static str;
///     fn visit<A: seed_agents_protocol::action::ActionType>(self) -> &'static str {
///         std::any::type_name::<A>()
///     }
/// }
/// assert!(AgentAction::visit("ListAgents", TypeName).is_some_and(|name| name.ends_with("::ListAgents")));
/// assert_eq!(AgentAction::visit("NoSuchAction", TypeName), None);
/// ```
pub trait ActionVisitor {
    /// What the work gives.
    type Output;
    /// Runs the work with `A`, the generated type of the named action.
    fn visit<A: ActionType>(self) -> Self::Output;
}

/// What every generated action type is, whatever its transport: what [`ActionVisitor::visit`]
/// may rely on.
pub trait ActionType: Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static {}

impl<T: Serialize + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static> ActionType for T {}

impl ActionInfo {
    /// The row of the action named `name`.
    pub fn find(name: &str) -> Option<&'static ActionInfo> {
        crate::generated::ACTIONS
            .binary_search_by(|info| info.name.cmp(name))
            .ok()
            .map(|index| &crate::generated::ACTIONS[index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_states_its_effect_and_known_ones_are_classified_right() {
        let reads = crate::generated::ACTIONS.iter().filter(|info| info.effect == Effect::Read).count();
        let writes = crate::generated::ACTIONS.iter().filter(|info| info.effect == Effect::Write).count();
        assert_eq!(reads + writes, crate::generated::ACTIONS.len());
        assert!(reads > 0 && writes > 0, "{reads} reads, {writes} writes");
        for (name, effect) in [
            ("ListAgents", Effect::Read),
            ("GetSession", Effect::Read),
            ("ReadAgentMemoryFile", Effect::Read),
            ("Subscribe", Effect::Read),
            ("CreateAgent", Effect::Write),
            ("MessageSession", Effect::Write),
            ("AppendFileUploadChunk", Effect::Write),
            ("DownloadAgentMemoryFile", Effect::Write),
            ("RegisterSigner", Effect::Write),
        ] {
            assert_eq!(ActionInfo::find(name).map(|info| info.effect), Some(effect), "{name}");
        }
        use crate::generated as proto;
        assert_eq!(<proto::ListAgents as Action>::EFFECT, Effect::Read);
        assert_eq!(<proto::MessageSession as Action>::EFFECT, Effect::Write);
    }

    #[test]
    fn every_action_in_the_table_is_visited_with_its_own_type() {
        struct TypeName;
        impl ActionVisitor for TypeName {
            type Output = &'static str;
            fn visit<A: ActionType>(self) -> &'static str {
                std::any::type_name::<A>()
            }
        }
        for info in crate::generated::ACTIONS {
            let visited = crate::AgentAction::visit(info.name, TypeName);
            assert!(
                visited.is_some_and(|name| name.ends_with(&format!("::{}", info.name))),
                "{}: {visited:?}",
                info.name
            );
        }
    }

    /// A guard rail for new actions: reads are named `List*`, `Get*` or `Read*` (and `Subscribe`),
    /// and every action so named is a read. Change this test when an action deliberately breaks
    /// the naming rule.
    #[test]
    fn reads_are_the_list_get_and_read_actions() {
        for info in crate::generated::ACTIONS {
            let named_read =
                ["List", "Get", "Read"].iter().any(|prefix| info.name.starts_with(prefix)) || info.name == "Subscribe";
            assert_eq!(info.effect == Effect::Read, named_read, "{} is a {}", info.name, info.effect.as_str());
        }
    }
}
