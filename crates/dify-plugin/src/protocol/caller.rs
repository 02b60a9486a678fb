//! Who called a tool, told from the request line's `app_id` and `message_id`.
//
// Dify passes these per code path and the daemon copies them into every request line
// (all eight envelope keys, null when unset):
// - the workflow tool node (`ToolNode._run` → `ToolEngine.generic_invoke`) passes `app_id`
//   and no `message_id`;
// - an agent app (`ToolEngine.agent_invoke`, from the function-calling / CoT agent runners)
//   passes `message_id` (and `app_id`);
// - a plugin's backwards invocation (agent strategies in the workflow Agent node,
//   `PluginToolBackwardsInvocation.invoke_tool` → `generic_invoke`) passes neither.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The consumer of a tool call's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Caller {
    /// A workflow tool node: builds its outputs from `variable` messages.
    Workflow,
    /// An agent app: reads the text and JSON messages as one string.
    AgentApp,
    /// Backwards invocation from a plugin (the Agent node's strategies).
    Backwards,
    /// A line without these fields, or with values Dify never sends.
    #[default]
    Unknown,
}

impl Caller {
    /// The caller an envelope's `app_id` and `message_id` tell.
    pub fn from_envelope(app_id: Presence, message_id: Presence) -> Caller {
        use Presence::{Empty, Set};
        match (app_id, message_id) {
            (Set | Empty, Set) => Caller::AgentApp,
            (Set, Empty) => Caller::Workflow,
            (Empty, Empty) => Caller::Backwards,
            _ => Caller::Unknown,
        }
    }

    /// Whether the answer carries one `variable` message per declared output. An
    /// unclassified call gets them: an empty workflow output is the worse failure.
    pub fn wants_variables(self) -> bool {
        matches!(self, Caller::Workflow | Caller::Unknown)
    }

    /// The name used in logs and on the `call` command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Caller::Workflow => "workflow",
            Caller::AgentApp => "agent",
            Caller::Backwards => "backwards",
            Caller::Unknown => "unknown",
        }
    }
}

/// What an envelope field held, read without keeping its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Presence {
    /// The key is missing.
    #[default]
    Absent,
    /// `null` or `""`.
    Empty,
    /// A non-empty string.
    Set,
    /// Any other JSON value.
    Other,
}

impl<'de> Deserialize<'de> for Presence {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PresenceVisitor)
    }
}

struct PresenceVisitor;

impl<'de> Visitor<'de> for PresenceVisitor {
    type Value = Presence;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, s: &str) -> Result<Presence, E> {
        Ok(if s.is_empty() { Presence::Empty } else { Presence::Set })
    }
    fn visit_unit<E>(self) -> Result<Presence, E> {
        Ok(Presence::Empty)
    }
    fn visit_none<E>(self) -> Result<Presence, E> {
        Ok(Presence::Empty)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Presence, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Presence, E> {
        Ok(Presence::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Presence, E> {
        Ok(Presence::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Presence, E> {
        Ok(Presence::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Presence, E> {
        Ok(Presence::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Presence, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Presence::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Presence, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Presence::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(envelope: &str) -> Caller {
        let line = format!(r#"{{"session_id":"s",{envelope}"event":"request","data":{{}}}}"#);
        crate::protocol::Inbound::parse(line.as_bytes()).unwrap().caller()
    }

    #[test]
    fn tells_the_three_dify_callers_apart() {
        assert_eq!(caller(r#""message_id":null,"app_id":"app-1","#), Caller::Workflow);
        assert_eq!(caller(r#""message_id":"msg-1","app_id":"app-1","#), Caller::AgentApp);
        assert_eq!(caller(r#""message_id":"msg-1","app_id":null,"#), Caller::AgentApp);
        assert_eq!(caller(r#""message_id":null,"app_id":null,"#), Caller::Backwards);
        assert_eq!(caller(r#""message_id":"","app_id":"","#), Caller::Backwards);
    }

    #[test]
    fn anything_else_is_unknown_and_gets_variables() {
        for envelope in ["", r#""app_id":"a","#, r#""message_id":null,"#, r#""message_id":5,"app_id":"a","#] {
            assert_eq!(caller(envelope), Caller::Unknown, "{envelope}");
        }
        let odd = caller(r#""message_id":{"x":[1,{"y":null}]},"app_id":[true],"#);
        assert_eq!(odd, Caller::Unknown);
        assert!(Caller::Unknown.wants_variables() && Caller::Workflow.wants_variables());
        assert!(!Caller::AgentApp.wants_variables() && !Caller::Backwards.wants_variables());
    }
}
