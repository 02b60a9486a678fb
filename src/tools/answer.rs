//! A tool's answer: a JSON object in a fixed field order, written straight from its record.
//
// Building a `serde_json::Map` for each answer cost an allocation per key and per value plus
// hashing, more than the rest of the answer; only `to_value` (for tests) builds one. Strings go
// through the store's word-at-a-time escaper (serde_json's own looks at every byte).

use serde_json::{json, Value};

use super::Tool;
use dify_plugin::protocol::outbound::{Member, ToolAnswer};
use event_store::json_text::{plain_len, write_str};
use event_store::record::{format_time, short_fingerprint, Record};

/// Fields before the record's, the record (with its storage key), and fields after it.
#[derive(Debug, Clone)]
pub struct Answer {
    tool: Option<Tool>,
    head: Vec<(&'static str, Value)>,
    record: Option<(Record, String)>,
    tail: Vec<(&'static str, Value)>,
    /// Why an earlier attempt could be taken over (`failed`, `lease_expired`,
    /// `never_started`): said by the sentence and the trigger's answer, not a field (a field is
    /// one more output message on every workflow call for a case the sentence covers).
    taken_over: Option<&'static str>,
}

/// Fields an answer usually has before its record: `outcome` and the tools' flags.
const HEAD_ROOM: usize = 8;

/// The record's fields as answers show them, in order (the payload only `event_status` adds).
const RECORD_FIELDS: [&str; 11] = [
    "event_id",
    "event_type",
    "status",
    "received_at",
    "updated_at",
    "attempt",
    "fingerprint",
    "lease_until",
    "completed_at",
    "result",
    "key",
];

/// Fields an agent's record leaves out, since every token of a result is paid again on each
/// later model call: a storage key and how a payload was compared mean nothing to a model,
/// the sentence before the record names the event, the `accepted` / `duplicate` / `found`
/// flags repeat `outcome`, and `updated_at` is a third timestamp no next step depends on.
/// A workflow node's outputs keep them all.
pub const NOT_FOR_AGENTS: [&str; 7] =
    ["key", "payload_compared_as", "event_id", "accepted", "duplicate", "found", "updated_at"];

/// Writes field `RECORD_FIELDS[index]` of a record as JSON: the one place that maps a field
/// to its value, for the answer object and for the workflow outputs alike.
fn write_record_field(out: &mut Vec<u8>, rec: &Record, key: &str, index: usize) {
    let text = |out: &mut Vec<u8>, t: Option<&str>| match t {
        Some(t) => write_str(out, t),
        None => out.extend_from_slice(b"null"),
    };
    match index {
        0 => write_str(out, &rec.event_id),
        1 => write_str(out, &rec.event_type),
        2 => write_str(out, rec.status.as_str()),
        3 => write_str(out, &rec.received_at),
        4 => write_str(out, &rec.updated_at),
        5 => write_value(out, &rec.attempt),
        6 => write_str(out, &rec.fingerprint),
        7 => text(out, rec.lease_until_ms.map(format_time).as_deref()),
        8 => text(out, rec.completed_at.as_deref()),
        9 => text(out, rec.result.as_deref()),
        _ => write_str(out, key),
    }
}

/// A number, bool or tree as serde_json writes it.
fn write_value<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value).expect("serialising an answer field into memory cannot fail");
}

/// A field's value as JSON, a string through the word-at-a-time escaper.
fn write_json_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => write_str(out, s),
        other => write_value(out, other),
    }
}

impl Answer {
    /// An answer whose first field is `outcome`.
    pub fn new(outcome: &str) -> Answer {
        // Room for the flags every tool sets before its record (growing from one cost three
        // reallocations per answer).
        let mut head = Vec::with_capacity(HEAD_ROOM);
        head.push(("outcome", json!(outcome)));
        Answer { tool: None, head, record: None, tail: Vec::new(), taken_over: None }
    }

    /// Appends a field (after the record's fields once a record is set).
    pub fn field(mut self, name: &'static str, value: Value) -> Answer {
        debug_assert!(self.get(name).is_none(), "answer field {name} set twice");
        match self.record {
            None => self.head.push((name, value)),
            Some(_) => self.tail.push((name, value)),
        }
        self
    }

    /// Shows `rec` (all but its payload, which only `event_status` returns) and its storage key.
    pub fn record(mut self, rec: Record, key: &str) -> Answer {
        self.record = Some((rec, key.to_owned()));
        self
    }

    /// Says why this call could take over an earlier attempt ([`Answer::taken_over`]).
    pub fn with_taken_over(mut self, reason: &'static str) -> Answer {
        self.taken_over = Some(reason);
        self
    }

    /// Why this call took over an earlier attempt, when it did.
    pub fn taken_over(&self) -> Option<&'static str> {
        self.taken_over
    }

    /// Marks the answer as `tool`'s: its sentence and declared outputs follow from that.
    pub fn of_tool(mut self, tool: Tool) -> Answer {
        self.tool = Some(tool);
        self
    }

    pub fn tool(&self) -> Option<Tool> {
        self.tool
    }

    /// The record shown, if any.
    pub fn shown_record(&self) -> Option<&Record> {
        self.record.as_ref().map(|(rec, _)| rec)
    }

    /// A field set with [`Answer::field`] (not the record's fields).
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.head.iter().chain(&self.tail).find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// The `outcome` field.
    pub fn outcome(&self) -> &str {
        self.get("outcome").and_then(Value::as_str).unwrap_or("")
    }

    /// The one-sentence summary the `text` message carries.
    pub fn sentence(&self) -> String {
        let mut out = Vec::new();
        super::sentence::write(self, &mut out);
        String::from_utf8(out).expect("sentences are written from str")
    }

    /// The answer as a JSON value (what it is written as).
    pub fn to_value(&self) -> Value {
        let mut out = Vec::new();
        self.write_object(&mut out, false, None);
        serde_json::from_slice(&out).expect("an answer is written as JSON")
    }

    /// Appends the answer object: the head fields, the record's (all but its payload) and
    /// storage key, the tail fields. For an agent's model (`agent`), without
    /// [`NOT_FOR_AGENTS`], null fields and flags that are false (`retry`, `stuck`, …: the
    /// sentence says what matters), and the fingerprint cut to a prefix (64 hex characters
    /// cost a model tokens and tell it nothing more). Lists each member in `members` when given.
    fn write_object<'a>(&self, out: &mut Vec<u8>, agent: bool, members: Option<&mut Vec<Member<'a>>>) {
        let shown = |name: &str, null: bool| !agent || !(null || NOT_FOR_AGENTS.contains(&name));
        let empty = |v: &Value| matches!(v, Value::Null | Value::Bool(false));
        // Plain calls, no closure behind `dyn`: each member's value is written inline.
        let mut object = Object { first: true, members };
        for (k, v) in self.head.iter().filter(|(k, v)| shown(k, empty(v))) {
            let start = object.open(out, k);
            write_json_value(out, v);
            object.close(out, k, start);
        }
        if let Some((rec, key)) = &self.record {
            let null = |index: usize| match index {
                7 => rec.lease_until_ms.is_none(),
                8 => rec.completed_at.is_none(),
                9 => rec.result.is_none(),
                _ => false,
            };
            for (index, name) in RECORD_FIELDS.iter().enumerate().filter(|(i, name)| shown(name, null(*i))) {
                let start = object.open(out, name);
                match *name {
                    "fingerprint" if agent => write_str(out, short_fingerprint(&rec.fingerprint)),
                    _ => write_record_field(out, rec, key, index),
                }
                object.close(out, name, start);
            }
        }
        for (k, v) in self.tail.iter().filter(|(k, v)| shown(k, empty(v))) {
            let start = object.open(out, k);
            write_json_value(out, v);
            object.close(out, k, start);
        }
        if object.first {
            out.push(b'{');
        }
        out.push(b'}');
    }
}

/// An answer object being written: whether a member came yet, and where each one's value lies
/// (when the caller lists them).
struct Object<'m, 'a> {
    first: bool,
    members: Option<&'m mut Vec<Member<'a>>>,
}

impl<'a> Object<'_, 'a> {
    /// Writes the separator and `"name":`; returns where the value starts.
    #[inline]
    fn open(&mut self, out: &mut Vec<u8>, name: &'static str) -> usize {
        out.push(if self.first { b'{' } else { b',' });
        self.first = false;
        // Every name is one of ours (RECORD_FIELDS and the tools' literals), none with
        // anything to escape, so it goes out as it is: the escaper's check cost more than
        // the copy, 17 times an answer.
        debug_assert_eq!(plain_len(name.as_bytes()), name.len(), "{name:?}");
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        out.len()
    }

    /// Lists the member whose value was written from `start`.
    #[inline]
    fn close(&mut self, out: &[u8], name: &'a str, start: usize) {
        if let Some(members) = self.members.as_deref_mut() {
            members.push((name, start..out.len()));
        }
    }
}

impl ToolAnswer for Answer {
    fn write_text(&self, out: &mut Vec<u8>) {
        super::sentence::write(self, out);
    }

    fn output_names(&self) -> &'static [String] {
        self.tool.map_or(&[], Tool::outputs)
    }

    fn write_json<'a>(&'a self, out: &mut Vec<u8>, members: &mut Vec<Member<'a>>) {
        self.write_object(out, false, Some(members));
    }

    fn write_agent_json(&self, out: &mut Vec<u8>) {
        self.write_object(out, true, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_store::record::{fingerprint, new_claim_id, Status};

    fn records() -> Vec<Record> {
        let base = Record {
            v: 1,
            event_id: "E\"1 é🎉\n".into(),
            event_type: "created".into(),
            payload: Some("{\"a\":1}".into()),
            fingerprint: fingerprint("created", Some("{\"a\":1}")),
            status: Status::Processing,
            received_at: format_time(1_785_924_000_000),
            updated_at: format_time(1_785_924_000_000),
            attempt: 1,
            lease_until_ms: None,
            completed_at: None,
            result: None,
            claim_id: new_claim_id(),
            run_id: None,
            door: None,
        };
        let done = Record {
            status: Status::Completed,
            attempt: 4_000_000_000,
            lease_until_ms: Some(1_785_924_300_000),
            completed_at: Some(format_time(1_785_924_100_000)),
            result: Some("ok \\ \"done\"".into()),
            payload: None,
            ..base.clone()
        };
        vec![base, done]
    }

    /// The answer as serde_json writes it from a map built field by field (the reference the
    /// hand-written form is held to).
    fn reference(a: &Answer) -> String {
        let mut m = serde_json::Map::new();
        for (k, v) in &a.head {
            m.insert((*k).into(), v.clone());
        }
        if let Some((rec, key)) = &a.record {
            let values = [
                json!(rec.event_id),
                json!(rec.event_type),
                json!(rec.status.as_str()),
                json!(rec.received_at),
                json!(rec.updated_at),
                json!(rec.attempt),
                json!(rec.fingerprint),
                json!(rec.lease_until_ms.map(format_time)),
                json!(rec.completed_at),
                json!(rec.result),
                json!(key),
            ];
            for (name, value) in RECORD_FIELDS.iter().zip(values) {
                m.insert((*name).into(), value);
            }
        }
        for (k, v) in &a.tail {
            m.insert((*k).into(), v.clone());
        }
        Value::Object(m).to_string()
    }

    #[test]
    fn serialises_exactly_as_its_value() {
        for rec in records() {
            let answers = [
                Answer::new("accepted")
                    .field("accepted", json!(true))
                    .field("duplicate", json!(false))
                    .field("retry", json!(false))
                    .record(rec.clone(), "evt_E"),
                Answer::new("found")
                    .field("found", json!(true))
                    .record(rec.clone(), "evt~RSIx")
                    .field("payload", json!(rec.payload))
                    .field("lease_expired", json!(false)),
                Answer::new("not_found")
                    .field("found", json!(false))
                    .field("event_id", json!("x"))
                    .field("key", json!("k")),
            ];
            for a in answers {
                let (mut written, mut members) = (Vec::new(), Vec::new());
                a.write_json(&mut written, &mut members);
                assert_eq!(String::from_utf8(written.clone()).unwrap(), reference(&a), "byte for byte serde_json's");
                // Every member is listed, in order, with the span of exactly its value.
                let value = a.to_value();
                let object = value.as_object().unwrap();
                assert_eq!(members.iter().map(|m| m.0).collect::<Vec<_>>(), object.keys().collect::<Vec<_>>());
                for (name, span) in members {
                    assert_eq!(serde_json::from_slice::<Value>(&written[span]).unwrap(), object[name], "{name}");
                }
            }
        }
    }

    #[test]
    fn agents_read_the_record_without_what_a_model_cannot_use() {
        for rec in records() {
            let answer = Answer::new("accepted")
                .field("accepted", json!(true))
                .field("duplicate", json!(false))
                .field("retry", json!(false))
                .record(rec.clone(), "evt_E")
                .field("payload_compared_as", json!("json"))
                .field("extra", Value::Null);
            let mut out = Vec::new();
            answer.write_agent_json(&mut out);
            let agent: Value = serde_json::from_slice(&out).unwrap();
            let mut full = answer.to_value();
            let map = full.as_object_mut().unwrap();
            for gone in NOT_FOR_AGENTS {
                assert!(agent.get(gone).is_none(), "{gone}");
                map.shift_remove(gone);
            }
            map.retain(|_, v| !v.is_null() && *v != json!(false));
            let fp = map.insert("fingerprint".into(), json!(rec.fingerprint[..19])).unwrap();
            assert_eq!(fp, json!(rec.fingerprint));
            assert_eq!(agent, full, "the rest as it is, in order");
            let keys: Vec<&String> = agent.as_object().unwrap().keys().collect();
            assert_eq!(keys, full.as_object().unwrap().keys().collect::<Vec<_>>());
            assert_eq!(agent["outcome"], "accepted");
            assert!(agent.get("retry").is_none(), "a false flag is left out");
            assert_eq!(agent["attempt"], json!(rec.attempt));
        }
    }

    #[test]
    fn value_has_the_fields_in_order() {
        let rec = records().remove(1);
        let v = Answer::new("completed").record(rec, "k").field("extra", json!(1)).to_value();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "outcome",
                "event_id",
                "event_type",
                "status",
                "received_at",
                "updated_at",
                "attempt",
                "fingerprint",
                "lease_until",
                "completed_at",
                "result",
                "key",
                "extra"
            ]
        );
        assert_eq!(v["lease_until"], "2026-08-05 10:05:00 UTC");
    }
}
