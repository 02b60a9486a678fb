//! The JSON record stored under each key, its fingerprint, and time formatting.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Processing,
    Completed,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Processing => "processing",
            Status::Completed => "completed",
            Status::Failed => "failed",
        }
    }
}

/// The value under `evt_…` keys (`v` = 1). Field names are the contract in architecture.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    pub event_id: String,
    pub event_type: String,
    pub payload: Option<String>,
    pub fingerprint: String,
    pub status: Status,
    pub received_at: String,
    pub updated_at: String,
    pub attempt: u32,
    /// Lease deadline in the store's clock (unix ms); absent = no lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Random id of the write that made this version: tells "my lost write landed" apart
    /// from "someone else's identical delivery landed".
    #[serde(default)]
    pub claim_id: String,
}

impl Record {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serialises")
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Record, String> {
        let r: Record = serde_json::from_slice(bytes).map_err(|e| format!("unreadable record: {e}"))?;
        if r.v != 1 {
            return Err(format!("record version {} is not supported", r.v));
        }
        Ok(r)
    }

    /// True when a lease was set and the store's clock has reached it.
    pub fn lease_expired(&self, store_now_ms: i64) -> bool {
        self.lease_until_ms.is_some_and(|until| store_now_ms >= until)
    }
}

pub fn new_claim_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// `sha256:<hex>` over the event type and the payload. A payload that parses as JSON is
/// canonicalised first (sorted keys, no insignificant whitespace; numbers keep their exact
/// text), so key order and spacing never make a "different" payload.
pub fn fingerprint(event_type: &str, payload: Option<&str>) -> String {
    let mut h = Sha256::new();
    h.update(b"stateful_tool/v1\0");
    h.update(event_type.as_bytes());
    h.update(b"\0");
    match payload {
        None => h.update(b"none"),
        Some(p) => match serde_json::from_str::<Value>(p) {
            Ok(v) => {
                h.update(b"json\0");
                let mut out = Vec::with_capacity(p.len());
                write_canonical(&v, &mut out);
                h.update(&out);
            }
            Err(_) => {
                h.update(b"text\0");
                h.update(p.as_bytes());
            }
        },
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, k).expect("string serialises");
                out.push(b':');
                write_canonical(val, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("scalar serialises"),
    }
}

/// `2026-08-05 10:00:00 UTC`, the record's human time format.
pub fn format_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "invalid time".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_key_order_and_spacing_do_not_change_the_fingerprint() {
        let a = fingerprint("created", Some(r#"{"a":1,"b":{"y":[1,2],"x":"s"}}"#));
        let b = fingerprint("created", Some("{ \"b\": {\"x\": \"s\", \"y\": [1, 2]},\n \"a\": 1 }"));
        assert_eq!(a, b);
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64);
    }

    #[test]
    fn different_content_changes_the_fingerprint() {
        let base = fingerprint("created", Some(r#"{"a":1}"#));
        assert_ne!(base, fingerprint("updated", Some(r#"{"a":1}"#)));
        assert_ne!(base, fingerprint("created", Some(r#"{"a":2}"#)));
        assert_ne!(base, fingerprint("created", None));
        assert_ne!(fingerprint("created", None), fingerprint("created", Some("")));
        assert_ne!(fingerprint("created", Some("1")), fingerprint("created", Some("\"1\"")));
        // Big integers keep their exact text instead of collapsing to one float.
        assert_ne!(
            fingerprint("created", Some(r#"{"id":12345678901234567890123}"#)),
            fingerprint("created", Some(r#"{"id":12345678901234567890124}"#))
        );
        // Type and payload boundaries cannot be shifted into each other.
        assert_ne!(fingerprint("a", Some("bc")), fingerprint("ab", Some("c")));
    }

    #[test]
    fn record_round_trips_and_rejects_other_versions() {
        let r = Record {
            v: 1,
            event_id: "E".into(),
            event_type: "created".into(),
            payload: None,
            fingerprint: fingerprint("created", None),
            status: Status::Processing,
            received_at: format_time(0),
            updated_at: format_time(0),
            attempt: 1,
            lease_until_ms: Some(10),
            completed_at: None,
            result: None,
            claim_id: new_claim_id(),
        };
        assert_eq!(Record::from_bytes(&r.to_bytes()).unwrap(), r);
        assert!(r.lease_expired(10) && !r.lease_expired(9));
        let mut v: Value = serde_json::from_slice(&r.to_bytes()).unwrap();
        v["v"] = 2.into();
        assert!(Record::from_bytes(&serde_json::to_vec(&v).unwrap()).is_err());
        assert!(Record::from_bytes(b"garbage").is_err());
        assert_eq!(format_time(0), "1970-01-01 00:00:00 UTC");
    }
}
