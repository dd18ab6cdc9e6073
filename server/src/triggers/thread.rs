//! A new-thread continuation's own instructions and tools.
//!
//! `systemPrompt` adds instructions to the agent's own prompt (or replaces it when
//! `includeAgentSystemPrompt` is false), and `tools` narrows the agent's callable grants to the
//! names it lists. A firing copies them onto its run as `input.thread`, so an edit of the trigger
//! never changes a run already queued; every later run in the session the firing opened (a user
//! answering the trigger's thread) reads them from that first run, as a delegated child's later
//! runs inherit its contract.

use std::collections::BTreeMap;

use crate::db::Connection;
use ipld_core::ipld::Ipld;
use seed_agents_protocol::generated::{AgentDefinition, AgentDefinitionSystemPrompt, TriggerContinuation};

use crate::error::ApiResult;

/// The run input key the overrides are stored under.
const KEY: &str = "thread";

/// What a new-thread continuation changes about the agent for its session's runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Thread {
    /// Instructions for the thread.
    pub system_prompt: Option<String>,
    /// Whether the agent's own prompt stays, with `system_prompt` after it (the default).
    pub include_agent_system_prompt: bool,
    /// The callables the thread is narrowed to.
    pub tools: Option<Vec<String>>,
}

impl Thread {
    /// The overrides a trigger's continuation asks for, or `None` when it asks for none.
    pub(crate) fn of(continuation: Option<&TriggerContinuation>) -> Option<Self> {
        let Some(TriggerContinuation::NewThreadContinuation(new_thread)) = continuation else { return None };
        let thread = Self {
            system_prompt: new_thread.system_prompt.clone(),
            include_agent_system_prompt: new_thread.include_agent_system_prompt != Some(false),
            tools: new_thread.tools.clone(),
        };
        (thread.system_prompt.is_some() || thread.tools.is_some()).then_some(thread)
    }

    /// The stored form: `{systemPrompt?, includeAgentSystemPrompt, tools?}`.
    pub(crate) fn to_ipld(&self) -> Ipld {
        let mut fields =
            BTreeMap::from([("includeAgentSystemPrompt".to_owned(), Ipld::Bool(self.include_agent_system_prompt))]);
        if let Some(prompt) = &self.system_prompt {
            fields.insert("systemPrompt".to_owned(), Ipld::String(prompt.clone()));
        }
        if let Some(tools) = &self.tools {
            fields.insert("tools".to_owned(), Ipld::List(tools.iter().cloned().map(Ipld::String).collect()));
        }
        Ipld::Map(fields)
    }

    fn from_ipld(value: &Ipld) -> Option<Self> {
        let Ipld::Map(fields) = value else { return None };
        let system_prompt = match fields.get("systemPrompt") {
            Some(Ipld::String(prompt)) => Some(prompt.clone()),
            _ => None,
        };
        let tools = match fields.get("tools") {
            Some(Ipld::List(tools)) => Some(
                tools
                    .iter()
                    .filter_map(|tool| match tool {
                        Ipld::String(name) => Some(name.clone()),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => None,
        };
        let include_agent_system_prompt = !matches!(fields.get("includeAgentSystemPrompt"), Some(Ipld::Bool(false)));
        Some(Self { system_prompt, include_agent_system_prompt, tools })
    }

    /// The agent as the thread runs it.
    pub(crate) fn apply(&self, definition: &mut AgentDefinition) {
        if let Some(prompt) = &self.system_prompt {
            let combined = if self.include_agent_system_prompt {
                let own = match &definition.system_prompt {
                    AgentDefinitionSystemPrompt::String(text) => text.clone(),
                    AgentDefinitionSystemPrompt::Array(blocks) => crate::agents::prompt::blocks_to_markdown(blocks),
                };
                format!("{}\n\n{prompt}", own.trim_end())
            } else {
                prompt.clone()
            };
            definition.system_prompt = AgentDefinitionSystemPrompt::String(combined);
        }
        if let Some(wanted) = &self.tools {
            crate::tools::registry::narrow(definition, wanted);
        }
    }
}

/// The overrides for a run in session `session_id` whose input (as claimed) is `input`: its own
/// `input.thread`, or that of the run a firing opened the session with.
pub(crate) fn of_run(conn: &Connection, input: &Ipld, session_id: &str) -> ApiResult<Option<Thread>> {
    if let Some(thread) = stored_in(input) {
        return Ok(Some(thread));
    }
    of_session(conn, session_id)
}

/// The overrides of session `session_id`: those of the run a firing opened it with.
pub(crate) fn of_session(conn: &Connection, session_id: &str) -> ApiResult<Option<Thread>> {
    Ok(super::store::opening_run_input(conn, session_id)?.as_ref().and_then(stored_in))
}

fn stored_in(input: &Ipld) -> Option<Thread> {
    match input {
        Ipld::Map(fields) => Thread::from_ipld(fields.get(KEY)?),
        _ => None,
    }
}

/// Adds the overrides to a run's input map.
pub(crate) fn store(input: &mut BTreeMap<String, Ipld>, thread: &Thread) {
    input.insert(KEY.to_owned(), thread.to_ipld());
}

#[cfg(test)]
mod tests {
    use seed_agents_protocol::generated::NewThreadContinuation;

    use super::*;

    fn new_thread(prompt: Option<&str>, include: Option<bool>, tools: Option<&[&str]>) -> TriggerContinuation {
        TriggerContinuation::NewThreadContinuation(NewThreadContinuation {
            system_prompt: prompt.map(str::to_owned),
            include_agent_system_prompt: include,
            tools: tools.map(|tools| tools.iter().map(|tool| (*tool).to_owned()).collect()),
            ..Default::default()
        })
    }

    fn agent(tools: Option<Vec<String>>) -> AgentDefinition {
        let mut definition =
            AgentDefinition::new("m", "p", "Agent", AgentDefinitionSystemPrompt::String("Be kind.\n".into()));
        definition.tools = tools;
        definition
    }

    #[test]
    fn a_plain_new_thread_changes_nothing() {
        assert_eq!(Thread::of(None), None);
        assert_eq!(Thread::of(Some(&new_thread(None, Some(false), None))), None);
    }

    #[test]
    fn the_prompt_is_added_or_replaces_and_tools_narrow() {
        let added = Thread::of(Some(&new_thread(Some("Summarise."), None, Some(&["search", "nope"])))).unwrap();
        let stored = Thread::from_ipld(&added.to_ipld()).unwrap();
        assert_eq!(stored, added, "the stored form reads back the same");
        let mut definition = agent(None);
        stored.apply(&mut definition);
        assert_eq!(definition.system_prompt, AgentDefinitionSystemPrompt::String("Be kind.\n\nSummarise.".into()));
        assert_eq!(definition.tools, Some(vec!["search".to_owned()]), "an ungranted name grants nothing");

        let replaced = Thread::of(Some(&new_thread(Some("Only this."), Some(false), None))).unwrap();
        let mut definition = agent(Some(vec!["web_search".into()]));
        replaced.apply(&mut definition);
        assert_eq!(definition.system_prompt, AgentDefinitionSystemPrompt::String("Only this.".into()));
        assert_eq!(definition.tools, Some(vec!["web_search".to_owned()]), "no tools field: grants unchanged");
    }
}
