//! The JSON record stored under each key, its fingerprint, and time formatting.

use serde::{Deserialize, Serialize};

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

/// The value under `evt_…` keys (`v` = 1). Field names are a stored format: records written
/// by one version are read by the next, so they never change.
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
    /// The workflow run that made this claim (`event_ingest`'s optional `run_id`): a later
    /// call of the same run finding its claim still `processing` is that run's retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Set when the trigger's door made this claim: a reservation until a workflow run takes
    /// it (Dify's `invoke_trigger_event`). Absent for the tools' own claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<DoorClaim>,
}

/// What became of a claim made at the trigger's door. Until a run takes it, its lease is the
/// subscription's start window; a delivery after that window takes the event over
/// (`never_started`), as after any expired lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoorClaim {
    /// When the first workflow run took this attempt (absent: no run has started yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Workflow runs started for this attempt: one per subscribed workflow (Dify's fan-out).
    #[serde(default)]
    pub runs: u32,
}

impl DoorClaim {
    /// True while no workflow run has taken the claim.
    pub fn waiting(&self) -> bool {
        self.started_at.is_none()
    }
}

impl Record {
    /// The stored JSON: byte for byte what `serde_json::to_vec(self)` writes (the derived
    /// `Serialize` is the format's definition; a test holds the two together), written by
    /// hand so strings go through the word-at-a-time escaper.
    pub fn to_bytes(&self) -> Vec<u8> {
        use crate::json_text::write_str;
        // Sized up front (the payload is most of it and gains a few escapes) so the buffer
        // is not regrown and copied while serialising.
        let mut out = Vec::with_capacity(512 + self.payload.as_ref().map_or(0, |p| p.len() + p.len() / 4));
        let o = &mut out;
        o.extend_from_slice(b"{\"v\":");
        put_int(o, self.v.into());
        o.extend_from_slice(b",\"event_id\":");
        write_str(o, &self.event_id);
        o.extend_from_slice(b",\"event_type\":");
        write_str(o, &self.event_type);
        o.extend_from_slice(b",\"payload\":");
        match &self.payload {
            Some(p) => write_str(o, p),
            None => o.extend_from_slice(b"null"),
        }
        o.extend_from_slice(b",\"fingerprint\":");
        write_str(o, &self.fingerprint);
        o.extend_from_slice(b",\"status\":");
        write_str(o, self.status.as_str());
        o.extend_from_slice(b",\"received_at\":");
        write_str(o, &self.received_at);
        o.extend_from_slice(b",\"updated_at\":");
        write_str(o, &self.updated_at);
        o.extend_from_slice(b",\"attempt\":");
        put_int(o, self.attempt.into());
        if let Some(until) = self.lease_until_ms {
            o.extend_from_slice(b",\"lease_until_ms\":");
            put_int(o, until);
        }
        if let Some(at) = &self.completed_at {
            o.extend_from_slice(b",\"completed_at\":");
            write_str(o, at);
        }
        if let Some(result) = &self.result {
            o.extend_from_slice(b",\"result\":");
            write_str(o, result);
        }
        o.extend_from_slice(b",\"claim_id\":");
        write_str(o, &self.claim_id);
        if let Some(run) = &self.run_id {
            o.extend_from_slice(b",\"run_id\":");
            write_str(o, run);
        }
        if let Some(door) = &self.door {
            o.extend_from_slice(b",\"door\":{");
            if let Some(at) = &door.started_at {
                o.extend_from_slice(b"\"started_at\":");
                write_str(o, at);
                o.push(b',');
            }
            o.extend_from_slice(b"\"runs\":");
            put_int(o, door.runs.into());
            o.push(b'}');
        }
        o.push(b'}');
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Record, String> {
        // Read as `str` when the bytes are UTF-8 (one check instead of one per stretch between
        // escapes); serde_json reports the same errors either way.
        let parsed = match std::str::from_utf8(bytes) {
            Ok(text) => serde_json::from_str::<Record>(text),
            Err(_) => serde_json::from_slice::<Record>(bytes),
        };
        let r = parsed.map_err(|e| format!("unreadable record: {e}"))?;
        if r.v != 1 {
            return Err(format!("record version {} is not supported", r.v));
        }
        Ok(r)
    }

    /// True when a lease was set and the store's clock has reached it.
    pub fn lease_expired(&self, store_now_ms: i64) -> bool {
        self.lease_until_ms.is_some_and(|until| store_now_ms >= until)
    }

    /// True while the record is a door claim that no workflow run has taken yet.
    pub fn waiting_for_run(&self) -> bool {
        self.status == Status::Processing && self.door.as_ref().is_some_and(DoorClaim::waiting)
    }
}

/// An integer as serde_json writes it.
fn put_int(out: &mut Vec<u8>, n: i64) {
    serde_json::to_writer(out, &n).expect("an integer serialises");
}

/// 32 lower-case hex digits of randomness.
pub fn new_claim_id() -> String {
    hex_text("", &rand::random::<u128>().to_be_bytes())
}

/// `prefix` then the lower-case hex of `bytes`, through hex's slice encoder (its `encode`
/// collects one `char` at a time, several times the instructions).
fn hex_text(prefix: &str, bytes: &[u8]) -> String {
    let mut text = vec![0; prefix.len() + 2 * bytes.len()];
    text[..prefix.len()].copy_from_slice(prefix.as_bytes());
    hex::encode_to_slice(bytes, &mut text[prefix.len()..]).expect("room for two digits a byte");
    String::from_utf8(text).expect("a str and hex digits")
}

/// `sha256:<hex>` over the event type and the payload. A payload that parses as JSON is
/// canonicalised first (sorted keys, no insignificant whitespace; numbers keep their exact
/// text), so key order and spacing never make a "different" payload.
pub fn fingerprint(event_type: &str, payload: Option<&str>) -> String {
    fingerprint_and_kind(event_type, payload).0
}

/// Hex characters of a fingerprint that messages and agents are shown: enough to tell two
/// fingerprints apart at a glance (the full one stays in the answer's fields).
pub const SHORT_FINGERPRINT_HEX: usize = 12;

/// `sha256:` and the first [`SHORT_FINGERPRINT_HEX`] hex characters of `fp` (`fp` itself
/// when it is shorter or not of that form).
pub fn short_fingerprint(fp: &str) -> &str {
    let end = "sha256:".len() + SHORT_FINGERPRINT_HEX;
    match fp.get(..end) {
        Some(prefix) if fp.starts_with("sha256:") => prefix,
        _ => fp,
    }
}

/// The fingerprint and how the payload was compared: `json` (canonical form), `text` (byte
/// for byte) or `none`.
pub fn fingerprint_and_kind(event_type: &str, payload: Option<&str>) -> (String, &'static str) {
    // ring's SHA-256 (its assembly, on every x86-64 and arm64) over sha2's: with SHA
    // extensions both are quick, without them (older CPUs, emulators) ring's takes about half
    // the instructions per block.
    let mut h = ring::digest::Context::new(&ring::digest::SHA256);
    h.update(b"stateful_tool/v1\0");
    h.update(event_type.as_bytes());
    h.update(b"\0");
    let kind = match payload {
        None => {
            h.update(b"none");
            "none"
        }
        Some(p) => match super::canonical::canonical_json(p) {
            Some(canonical) => {
                h.update(b"json\0");
                h.update(&canonical);
                "json"
            }
            None => {
                h.update(b"text\0");
                h.update(p.as_bytes());
                "text"
            }
        },
    };
    (hex_text("sha256:", h.finish().as_ref()), kind)
}

/// Refuses JSON nested deeper than the parser accepts: compared as text, its spacing would
/// matter again. Called only for payloads that did not parse as JSON.
pub fn check_depth(payload: &str) -> Result<(), String> {
    match super::canonical::canonical_json_or_error(payload) {
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => Err(format!(
            "payload is JSON nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects; flatten it, or send \
             it as text that is not JSON"
        )),
        _ => Ok(()),
    }
}

/// serde_json's nesting limit (arrays and objects), which the canonical form inherits.
pub const MAX_JSON_DEPTH: usize = 127;

/// Reads [`format_time`] back (unix ms); None for anything else.
pub fn parse_time(text: &str) -> Option<i64> {
    let t = chrono::NaiveDateTime::parse_from_str(text.strip_suffix(" UTC")?, "%Y-%m-%d %H:%M:%S").ok()?;
    Some(t.and_utc().timestamp_millis())
}

/// `2026-08-05 10:00:00 UTC`, the record's human time format.
pub fn format_time(ms: i64) -> String {
    // Years 0 to 9999 (every real timestamp) are written from the civil date computed here:
    // chrono's `format` re-parses its pattern on every call, and even its field getters cost
    // several times this; this runs several times per ingest. Others go through chrono.
    let secs = ms.div_euclid(1000);
    let (days, second_of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return match chrono::DateTime::from_timestamp_millis(ms) {
            Some(t) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            None => "invalid time".to_owned(),
        };
    }
    let mut text = *b"0000-00-00 00:00:00 UTC";
    let two = |text: &mut [u8; 23], at: usize, v: i64| {
        text[at] = b'0' + (v / 10) as u8;
        text[at + 1] = b'0' + (v % 10) as u8;
    };
    two(&mut text, 0, year / 100);
    two(&mut text, 2, year % 100);
    two(&mut text, 5, month);
    two(&mut text, 8, day);
    two(&mut text, 11, second_of_day / 3600);
    two(&mut text, 14, second_of_day / 60 % 60);
    two(&mut text, 17, second_of_day % 60);
    String::from_utf8(text.to_vec()).expect("digits and separators are ASCII")
}

/// (year, month, day) of the proleptic Gregorian calendar for days since 1970-01-01
/// (Howard Hinnant's `civil_from_days`: eras of 400 years, March-based years).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 { march_month + 3 } else { march_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn to_bytes_is_what_the_derived_serialize_writes() {
        let odd = "q\"b\\c\n\u{1}\u{7f}é🎉 {\"a\": [1, \"x\"]}";
        let base = Record {
            v: 1,
            event_id: "evt-1".into(),
            event_type: "created".into(),
            payload: Some(odd.into()),
            fingerprint: fingerprint("created", Some(odd)),
            status: Status::Processing,
            received_at: format_time(1_780_000_000_123),
            updated_at: format_time(1_780_000_000_456),
            attempt: 3,
            lease_until_ms: Some(-5),
            completed_at: Some(odd.into()),
            result: Some(String::new()),
            claim_id: new_claim_id(),
            run_id: Some("run \"1\"".into()),
            door: Some(DoorClaim { started_at: Some(odd.into()), runs: 2 }),
        };
        let mut variants = vec![base.clone()];
        variants.push(Record { door: Some(DoorClaim::default()), ..base.clone() });
        for status in [Status::Completed, Status::Failed] {
            variants.push(Record {
                status,
                payload: None,
                lease_until_ms: None,
                completed_at: None,
                result: None,
                run_id: None,
                door: None,
                attempt: u32::MAX,
                claim_id: String::new(),
                ..base.clone()
            });
        }
        variants.push(Record { lease_until_ms: Some(i64::MAX), event_id: odd.into(), ..base.clone() });
        for rec in variants {
            assert_eq!(String::from_utf8(rec.to_bytes()).unwrap(), serde_json::to_string(&rec).unwrap());
            assert_eq!(Record::from_bytes(&rec.to_bytes()).unwrap(), rec);
        }
    }

    #[test]
    fn json_key_order_and_spacing_do_not_change_the_fingerprint() {
        let a = fingerprint("created", Some(r#"{"a":1,"b":{"y":[1,2],"x":"s"}}"#));
        let b = fingerprint("created", Some("{ \"b\": {\"x\": \"s\", \"y\": [1, 2]},\n \"a\": 1 }"));
        assert_eq!(a, b);
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64);
    }

    /// Stored records carry fingerprints: their bytes are a contract (computed independently,
    /// with Python's hashlib over the documented input).
    #[test]
    fn fingerprints_are_the_documented_sha256() {
        assert_eq!(
            fingerprint("created", Some(" { \"b\" : [2, \"x\"], \"a\": 1 } ")),
            "sha256:250c4b06d68425c5ae6cfd127211c384d20d1f94ccf8bba500ca8ddd6d293219"
        );
        assert_eq!(
            fingerprint("created", None),
            "sha256:9e5b845381f77b8f3ce99dc2afbec2dc32bbc2d35c2cb2c41f252b838002e3fb"
        );
        let id = new_claim_id();
        assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{id}");
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
            run_id: None,
            door: None,
        };
        assert_eq!(Record::from_bytes(&r.to_bytes()).unwrap(), r);
        assert!(r.lease_expired(10) && !r.lease_expired(9));
        let mut v: Value = serde_json::from_slice(&r.to_bytes()).unwrap();
        v["v"] = 2.into();
        assert!(Record::from_bytes(&serde_json::to_vec(&v).unwrap()).is_err());
        assert!(Record::from_bytes(b"garbage").is_err());
        for bad in [&b"{\"v\":1,"[..], b"{\"v\":\"x\"}", b"[1]", b"{\"v\":1,\"event_id\":\"a\\q\"}", b"\xff"] {
            let via_slice = serde_json::from_slice::<Record>(bad).unwrap_err().to_string();
            assert_eq!(Record::from_bytes(bad).unwrap_err(), format!("unreadable record: {via_slice}"));
        }
        assert_eq!(format_time(0), "1970-01-01 00:00:00 UTC");
        let spread = (0..2000i64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15u64 as i64) % 400_000_000_000_000);
        // Each side of year 0 and of year 9999, leap days, centuries, both ends of i64.
        let edges = [
            -62_167_219_200_001,
            -62_167_219_200_000,
            -1,
            951_782_400_000,
            951_868_799_999,
            -2_203_891_200_000,
            1_785_924_000_999,
            4_102_444_799_999,
            253_402_300_799_999,
            253_402_300_800_000,
            i64::MIN,
            i64::MAX,
        ];
        for ms in edges.into_iter().chain(spread) {
            let slow = chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                .unwrap_or_else(|| "invalid time".to_owned());
            assert_eq!(format_time(ms), slow, "{ms}");
        }
    }
}
