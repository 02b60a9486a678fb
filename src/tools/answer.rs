//! A tool's answer: a JSON object in a fixed field order, serialised straight from its record.
//
// Building a `serde_json::Map` for each answer cost an allocation per key and per value plus
// hashing, more than the rest of the answer; only `to_value` (for tests) builds one.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value};

use crate::store::record::{format_time, Record};

/// Fields before the record's, the record (with its storage key), and fields after it.
#[derive(Debug, Clone)]
pub struct Answer {
    head: Vec<(&'static str, Value)>,
    record: Option<(Record, String)>,
    tail: Vec<(&'static str, Value)>,
}

impl Answer {
    /// An answer whose first field is `outcome`.
    pub fn new(outcome: &str) -> Answer {
        Answer { head: vec![("outcome", json!(outcome))], record: None, tail: Vec::new() }
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

    /// A field set with [`Answer::field`] (not the record's fields).
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.head.iter().chain(&self.tail).find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    /// The answer as a JSON value (tests read fields from it); the field list is the one in
    /// `Serialize`.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("an answer serialises to JSON")
    }
}

impl Serialize for Answer {
    /// The head fields, the record's (all but its payload) and storage key, the tail fields.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in &self.head {
            m.serialize_entry(k, v)?;
        }
        if let Some((rec, key)) = &self.record {
            m.serialize_entry("event_id", &rec.event_id)?;
            m.serialize_entry("event_type", &rec.event_type)?;
            m.serialize_entry("status", rec.status.as_str())?;
            m.serialize_entry("received_at", &rec.received_at)?;
            m.serialize_entry("updated_at", &rec.updated_at)?;
            m.serialize_entry("attempt", &rec.attempt)?;
            m.serialize_entry("fingerprint", &rec.fingerprint)?;
            m.serialize_entry("lease_until", &rec.lease_until_ms.map(format_time))?;
            m.serialize_entry("completed_at", &rec.completed_at)?;
            m.serialize_entry("result", &rec.result)?;
            m.serialize_entry("key", key)?;
        }
        for (k, v) in &self.tail {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{fingerprint, new_claim_id, Status};

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
                assert_eq!(serde_json::to_string(&a).unwrap(), a.to_value().to_string());
            }
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
