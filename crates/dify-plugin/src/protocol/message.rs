//! The one reader of a daemon → plugin line (`Message`), and the one pass that reads a plain request straight into the handler's type.

use serde::Deserialize;
use serde_json::Value;

use super::caller::{Caller, Presence};

/// The (session id, caller, data) of `line` when it is plainly a request (event `request`, a
/// session id, and a `data` object that `D` reads), all read in one pass by [`Message`] with
/// `data` going straight into the handler's type: scanning `data` once to keep it as text
/// and once more to read it was a tenth of a tool call's instructions. `None` for any other
/// line, which `Inbound::parse` and `Inbound::into_request` then take or refuse as their
/// rule says (`data` is read as an object whatever `D` would accept, so both agree on every
/// line).
pub(crate) fn request_in_one_pass<'a, D: Deserialize<'a>>(line: &'a str) -> Option<(String, Caller, D)> {
    let message = serde_json::from_str::<Message<Object<D>>>(line).ok()?;
    if message.event != "request" {
        return None;
    }
    Some((message.session_id?, Caller::from_envelope(message.app_id, message.message_id), message.data?.0))
}

/// `D` read from a JSON object only: the request rule takes no other `data`, even where `D`
/// would (serde's derive for a struct also reads an array).
pub(crate) struct Object<D>(pub(crate) D);

impl<'de, D: Deserialize<'de>> Deserialize<'de> for Object<D> {
    fn deserialize<De: serde::Deserializer<'de>>(d: De) -> Result<Self, De::Error> {
        struct Members<D>(std::marker::PhantomData<D>);
        impl<'de, D: Deserialize<'de>> serde::de::Visitor<'de> for Members<D> {
            type Value = Object<D>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a request's data object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Object<D>, A::Error> {
                D::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_map(Members(std::marker::PhantomData))
    }
}

/// The one reader of a daemon → plugin line: the envelope members the runtimes act on, and
/// `data` as `D` (its text for `Inbound`, the handler's own type in the one pass, a
/// request's data again for `RequestData::parse`). A repeated member reads as its last
/// value, as a JSON map would keep it; every other member is read as a tree and dropped, so
/// the same nesting limit applies to the whole line. Hand-written because derive refuses a
/// repeated member.
pub(crate) struct Message<D> {
    pub(crate) session_id: Option<String>,
    pub(crate) event: String,
    pub(crate) data: Option<D>,
    pub(crate) app_id: Presence,
    pub(crate) message_id: Presence,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Member {
    SessionId,
    Event,
    Data,
    AppId,
    MessageId,
    #[serde(other)]
    Other,
}

impl<'de, D: Deserialize<'de>> Deserialize<'de> for Message<D> {
    fn deserialize<De: serde::Deserializer<'de>>(d: De) -> Result<Self, De::Error> {
        struct Members<D>(std::marker::PhantomData<D>);
        impl<'de, D: Deserialize<'de>> serde::de::Visitor<'de> for Members<D> {
            type Value = Message<D>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a daemon message object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Message<D>, A::Error> {
                let (mut session_id, mut event, mut data) = (None, None, None);
                let (mut app_id, mut message_id) = (Presence::Absent, Presence::Absent);
                while let Some(member) = map.next_key::<Member>()? {
                    match member {
                        Member::SessionId => session_id = map.next_value::<Option<String>>()?,
                        Member::Event => event = Some(map.next_value::<String>()?),
                        Member::Data => data = map.next_value::<Option<D>>()?,
                        Member::AppId => app_id = map.next_value()?,
                        Member::MessageId => message_id = map.next_value()?,
                        Member::Other => drop(map.next_value::<Value>()?),
                    }
                }
                let event = event.ok_or_else(|| serde::de::Error::missing_field("event"))?;
                Ok(Message { session_id, event, data, app_id, message_id })
            }
        }
        d.deserialize_map(Members(std::marker::PhantomData))
    }
}

/// Recovers the session id from the start of a line that could not be parsed in full
/// (truncated or oversize). The daemon always writes `session_id` first, as a plain UUID.
pub fn session_id_from_prefix(line: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"session_id\"";
    let start = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &line[start..];
    let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
    let rest = rest.strip_prefix(b":")?;
    let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest.get(end) != Some(&b'"') || end == 0 || end > 128 {
        return None;
    }
    let id = std::str::from_utf8(&rest[..end]).ok()?;
    id.chars().all(|c| c.is_ascii_graphic()).then(|| id.to_owned())
}

/// The heartbeat line, exactly as the SDK writes it.
pub(crate) const HEARTBEAT: &[u8] = b"{\"event\":\"heartbeat\",\"session_id\":null,\"data\":{}}\n";
