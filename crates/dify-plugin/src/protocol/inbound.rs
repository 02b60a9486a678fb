//! What the runtimes make of a daemon line (`Inbound`): a request, a message they skip, or a refusal that still names its session.

use serde_json::value::RawValue;
use serde_json::Value;

use super::caller::{Caller, Presence};
use super::message::{session_id_from_prefix, Message};
use super::request::RequestData;

/// A daemon → plugin line (`pluginInStreamMessage`): only the fields we act on. `data` stays
/// JSON text (see [`RequestData`]).
#[derive(Debug)]
pub struct Inbound {
    /// The session the message belongs to (`null` on a heartbeat-like message).
    pub session_id: Option<String>,
    /// `request`, or `backwards_response` (the answer to a plugin's call into Dify).
    pub event: String,
    /// The message's `data`, as its JSON text.
    pub data: Option<Box<RawValue>>,
    /// Whether the envelope named an app ([`Caller`] is told from this and `message_id`).
    pub app_id: Presence,
    /// Whether the envelope named a chat message.
    pub message_id: Presence,
}

/// Why an input line could not be taken as a request; `session_id` is set when it was
/// readable, so that session can still be answered.
#[derive(Debug)]
pub struct InboundError {
    /// The session the line names, when that much could be read.
    pub session_id: Option<String>,
    /// What is wrong with the line (it never quotes the line: it may hold credentials).
    pub message: String,
}

impl Inbound {
    /// Who made this call (which Dify code path), from `app_id` and `message_id`.
    pub fn caller(&self) -> Caller {
        Caller::from_envelope(self.app_id, self.message_id)
    }

    /// Reads one daemon line (without its newline) with the one reader of a line, `data`
    /// kept as its text.
    pub fn parse(line: &[u8]) -> Result<Inbound, InboundError> {
        // From `str` when the line is UTF-8 (checking it once is cheaper than serde_json
        // checking every stretch between escapes); from the bytes otherwise, so the error
        // says where the line is broken.
        let read = match std::str::from_utf8(line) {
            Ok(text) => serde_json::from_str::<Message<Box<RawValue>>>(text),
            Err(_) => serde_json::from_slice::<Message<Box<RawValue>>>(line),
        };
        let Message { session_id, event, data, app_id, message_id } = read.map_err(|e| refused(line, &e))?;
        Ok(Inbound { session_id, event, data, app_id, message_id })
    }

    /// The one rule that takes a message as a request, for every transport: event `request`,
    /// a session id (the message's own, else `fallback`, e.g. the HTTP runtime's session
    /// header) and a `data` object; the request's (session id, caller, data). A
    /// `backwards_response` (the daemon's answer to a plugin's call back into Dify, which the
    /// duplex runtimes route to the waiting call before this rule) is `Ok(None)`.
    pub fn into_request(self, fallback: Option<String>) -> Result<Option<(String, Caller, RequestData)>, InboundError> {
        let caller = self.caller();
        let session_id = self.session_id.or(fallback);
        match self.event.as_str() {
            "request" => {}
            "backwards_response" => return Ok(None),
            // Without a session the message is only logged, and a log line never repeats input.
            other => {
                let message = match session_id {
                    Some(_) => format!("unknown event {other:?}: expected \"request\""),
                    None => "unknown event".to_owned(),
                };
                return Err(InboundError { session_id, message });
            }
        }
        match (session_id, self.data.and_then(RequestData::from_raw)) {
            (Some(sid), Some(data)) => Ok(Some((sid, caller, data))),
            (None, _) => Err(InboundError { session_id: None, message: "a request without a session_id".into() }),
            (session_id, _) => Err(InboundError { session_id, message: "request without a data object".into() }),
        }
    }
}

/// Why `line` is not a daemon message, and the session it names when that can be read: its
/// top-level `session_id` when the line is JSON, else what its start says.
fn refused(line: &[u8], e: &serde_json::Error) -> InboundError {
    use serde_json::error::Category;
    let (session_id, what) = match e.classify() {
        Category::Data => {
            let tree = serde_json::from_slice::<Value>(line).ok();
            let sid = tree.as_ref().and_then(|t| t.get("session_id")?.as_str().map(str::to_owned));
            (sid, "not a daemon message")
        }
        Category::Io | Category::Syntax | Category::Eof => (session_id_from_prefix(line), "not valid JSON"),
    };
    InboundError { session_id, message: format!("input line is {what}: {e}") }
}

#[cfg(test)]
mod tests {
    use super::super::message::request_in_one_pass;
    use super::super::request::Fields;
    use super::*;
    use serde::Deserialize;

    /// Every line the one pass takes, the rule takes alike; lines it leaves go to the rule.
    #[test]
    fn the_one_pass_agrees_with_the_rule() {
        let lines = [
            r#"{"session_id":"s","event":"request","data":{"a":1}}"#,
            r#"{"session_id":"s","app_id":"a","message_id":"m","event":"request","data":{"a":"\u00e9"}}"#,
            r#"{"session_id":"s","event":"backwards_response","data":{}}"#,
            r#"{"event":"request","data":{}}"#,
            r#"{"session_id":null,"event":"request","data":{}}"#,
            r#"{"session_id":"s","event":"request","data":null}"#,
            r#"{"session_id":"s","event":"request","data":[1]}"#,
            r#"{"session_id":"s","event":"request","data":["x"]}"#,
            r#"{"session_id":"s","event":"request"}"#,
            r#"{"session_id":"a","session_id":"b","event":"request","data":{}}"#,
            r#"{"session_id":"s","event":"ping","data":{}}"#,
        ];
        /// A type serde's derive also reads from an array: the one pass still takes objects only.
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Lenient<'a> {
            #[serde(borrow)]
            a: Option<std::borrow::Cow<'a, str>>,
        }
        for line in lines {
            let rule = Inbound::parse(line.as_bytes()).and_then(|m| m.into_request(None));
            if request_in_one_pass::<Lenient>(line).is_some() {
                assert!(matches!(rule, Ok(Some(_))), "{line}: taken in one pass, refused by the rule");
            }
            match request_in_one_pass::<Fields>(line) {
                Some((sid, caller, data)) => {
                    let (rsid, rcaller, rdata) = rule.unwrap().unwrap();
                    assert_eq!((sid, caller), (rsid, rcaller), "{line}");
                    let ours: Vec<_> = data.iter().map(|(k, v)| (k.to_owned(), v.get().to_owned())).collect();
                    let theirs: Vec<_> =
                        rdata.fields().unwrap().iter().map(|(k, v)| (k.to_owned(), v.get().to_owned())).collect();
                    assert_eq!(ours, theirs, "{line}");
                }
                None => assert!(
                    !matches!(rule, Ok(Some((ref sid, ..))) if sid == "s"),
                    "{line}: left to the rule, taken plainly"
                ),
            }
        }
    }

    #[test]
    fn one_rule_takes_a_message_as_a_request() {
        let take =
            |line: &[u8], fallback: Option<&str>| Inbound::parse(line).unwrap().into_request(fallback.map(Into::into));
        let (sid, _, data) = take(br#"{"session_id":"s","event":"request","data":{"a":1}}"#, None).unwrap().unwrap();
        assert_eq!((sid.as_str(), data.source()), ("s", r#"{"a":1}"#));
        let (sid, ..) = take(br#"{"event":"request","data":{}}"#, Some("hdr")).unwrap().unwrap();
        assert_eq!(sid, "hdr", "the transport's session id stands in for a missing one");
        assert!(take(br#"{"session_id":"s","event":"backwards_response","data":{}}"#, None).unwrap().is_none());
        let e = take(br#"{"session_id":"s","event":"request","data":[1]}"#, None).unwrap_err();
        assert_eq!((e.session_id.as_deref(), e.message.as_str()), (Some("s"), "request without a data object"));
        let e = take(br#"{"session_id":"s","event":"ping","data":{}}"#, None).unwrap_err();
        assert!(e.message.contains("\"ping\""), "{}", e.message);
        let e = take(br#"{"event":"ping","data":{}}"#, None).unwrap_err();
        assert_eq!(
            (e.session_id, e.message.as_str()),
            (None, "unknown event"),
            "a message without a session is not echoed"
        );
        assert_eq!(take(br#"{"event":"request","data":{}}"#, None).unwrap_err().session_id, None);
    }

    #[test]
    fn parses_request_envelope() {
        let line = br#"{"session_id":"s1","conversation_id":null,"message_id":null,"app_id":"a","endpoint_id":null,"context":null,"event":"request","data":{"action":"x"}}"#;
        let m = Inbound::parse(line).unwrap();
        assert_eq!(m.session_id.as_deref(), Some("s1"));
        assert_eq!(m.event, "request");
        assert_eq!(m.caller(), crate::protocol::Caller::Workflow, "app_id without message_id");
        assert_eq!(m.data.unwrap().get(), r#"{"action":"x"}"#);
        let text = std::str::from_utf8(line).unwrap();
        let (sid, caller, data) = request_in_one_pass::<Fields>(text).unwrap();
        assert_eq!((sid.as_str(), caller, data.str("action").as_deref()), ("s1", Caller::Workflow, Some("x")));
    }

    #[test]
    fn non_json_with_readable_session_id_keeps_it() {
        let e = Inbound::parse(br#"{"session_id": "abc-1", "event":"request", "data": {"#).unwrap_err();
        assert_eq!(e.session_id.as_deref(), Some("abc-1"));
        let e = Inbound::parse(b"this is not json").unwrap_err();
        assert_eq!(e.session_id, None);
    }

    #[test]
    fn repeated_keys_take_the_last_value_as_before() {
        let m = Inbound::parse(br#"{"session_id":"a","session_id":"b","event":"request","data":{"x":1}}"#).unwrap();
        assert_eq!(m.session_id.as_deref(), Some("b"));
        let e = Inbound::parse(br#"{"session_id":"a","event":"request","data":[1],"event":5}"#).unwrap_err();
        assert_eq!(e.session_id.as_deref(), Some("a"));
        assert!(e.message.starts_with("input line is not a daemon message"), "{}", e.message);
    }

    #[test]
    fn too_deep_nesting_is_refused_where_a_tree_is_built() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let line = format!(r#"{{"session_id":"d","event":"request","context":{deep},"data2":1}}"#);
        let e = Inbound::parse(line.as_bytes()).unwrap_err();
        assert!(e.message.starts_with("input line is not valid JSON"), "{}", e.message);
        assert_eq!(e.session_id.as_deref(), Some("d"));
        // `data` stays text (checked without recursion); a handler's tree of it is refused.
        let line = format!(r#"{{"session_id":"d","event":"request","data":{{"x":{deep}}}}}"#);
        let (_, _, data) = Inbound::parse(line.as_bytes()).unwrap().into_request(None).unwrap().unwrap();
        assert!(data.to_value().unwrap_err().to_string().contains("recursion limit"));
    }

    #[test]
    fn numeric_session_id_is_not_a_session() {
        let e = Inbound::parse(br#"{"session_id":5,"event":"request","data":{}}"#).unwrap_err();
        assert_eq!(e.session_id, None);
    }

    #[test]
    fn prefix_scan_rejects_escapes_and_empty() {
        assert_eq!(session_id_from_prefix(br#"{"session_id":"a\"b"}"#), None);
        assert_eq!(session_id_from_prefix(br#"{"session_id":""}"#), None);
        assert_eq!(session_id_from_prefix(br#"{"session_id":"x y"}"#), None);
    }
}
