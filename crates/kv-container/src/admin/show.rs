//! Event records shown for people: a table for `kv ls`, all fields for `kv get`.

use std::fmt::Write;

use super::source::Item;
use event_store::key::parse_storage_key;
use event_store::record::{format_time, Record, Status};

/// `6d23h59m`, `42s`, `850ms`.
pub(crate) fn duration(ms: i64) -> String {
    if ms < 1000 {
        return format!("{}ms", ms.max(0));
    }
    let s = ms / 1000;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{sec}s"),
        (0, 0, _) => format!("{m}m{sec}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h{m}m"),
    }
}

fn ttl(item: &Item) -> String {
    item.ttl_ms.map_or_else(|| "none".to_owned(), duration)
}

/// `-`, `12s left`, or `expired 3s ago` (by the store's clock, as the plugin judges it).
fn lease(rec: &Record, now_ms: i64) -> String {
    match rec.lease_until_ms {
        None => "-".to_owned(),
        Some(until) if until > now_ms => format!("{} left", duration(until - now_ms)),
        Some(until) => format!("expired {} ago", duration(now_ms - until)),
    }
}

/// One line per key, columns aligned; keys that are not event records show their size.
pub(crate) fn table(items: &[Item]) -> String {
    let header = ["KEY", "EVENT_ID", "TYPE", "STATUS", "ATTEMPT", "RECEIVED", "LEASE", "TTL"].map(str::to_owned);
    let mut rows = vec![header];
    for item in items {
        rows.push(match Record::from_bytes(&item.value) {
            Ok(r) => [
                item.key.clone(),
                r.event_id.clone(),
                r.event_type.clone(),
                r.status.as_str().to_owned(),
                r.attempt.to_string(),
                r.received_at.clone(),
                lease(&r, item.now_ms),
                ttl(item),
            ],
            Err(_) => {
                let size = format!("({} bytes, not an event record)", item.value.len());
                [
                    item.key.clone(),
                    size,
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    ttl(item),
                ]
            }
        });
    }
    let widths: Vec<usize> = (0..8).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    let _ = writeln!(out, "{} keys", items.len());
    out
}

/// The lease line: the end of a running lease, or why there is none.
fn lease_text(r: &Record, now_ms: i64) -> String {
    match (r.lease_until_ms, r.status) {
        (Some(until), _) if r.waiting_for_run() => {
            format!("until {} ({}; the start window of a claim no run took yet)", format_time(until), lease(r, now_ms))
        }
        (Some(until), _) => format!("until {} ({})", format_time(until), lease(r, now_ms)),
        (None, Status::Processing) => "none (stays processing until completed)".to_owned(),
        (None, status) => format!("none (the run is over: {})", status.as_str()),
    }
}

/// Every field of one record, one per line; a value that is not an event record is printed raw.
pub(crate) fn detail(item: &Item) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: &str| {
        let _ = writeln!(out, "{name:<13} {value}");
    };
    field("key", &item.key);
    match Record::from_bytes(&item.value) {
        Ok(r) => {
            if let Some((Some(ns), _)) = parse_storage_key(&item.key) {
                field("namespace", &ns);
            }
            field("event_id", &r.event_id);
            field("event_type", &r.event_type);
            field("status", r.status.as_str());
            field("attempt", &r.attempt.to_string());
            field("received_at", &r.received_at);
            field("updated_at", &r.updated_at);
            field("lease", &lease_text(&r, item.now_ms));
            if let Some(door) = &r.door {
                let text = match &door.started_at {
                    None => "claimed at the door, no run started".to_owned(),
                    Some(at) => format!("claimed at the door, taken by a run at {at} ({} run(s) started)", door.runs),
                };
                field("trigger", &text);
            }
            field("completed_at", r.completed_at.as_deref().unwrap_or("-"));
            field("result", r.result.as_deref().unwrap_or("-"));
            field("fingerprint", &r.fingerprint);
            field("ttl", &ttl(item));
            field("record", &format!("v{}, {} bytes", r.v, item.value.len()));
            field("payload", r.payload.as_deref().unwrap_or("-"));
        }
        Err(why) => {
            field("ttl", &ttl(item));
            field("note", &format!("not an event record ({why})"));
            field("value", &String::from_utf8_lossy(&item.value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: Status, lease_until_ms: Option<i64>, door: Option<event_store::record::DoorClaim>) -> Record {
        Record {
            v: 1,
            event_id: "E".into(),
            event_type: "created".into(),
            payload: None,
            fingerprint: "sha256:x".into(),
            status,
            received_at: format_time(0),
            updated_at: format_time(0),
            attempt: 1,
            lease_until_ms,
            completed_at: None,
            result: None,
            claim_id: String::new(),
            run_id: None,
            door,
        }
    }

    #[test]
    fn the_lease_line_says_why_there_is_none_and_what_a_door_claim_waits_for() {
        let over = lease_text(&record(Status::Completed, None, None), 0);
        assert_eq!(over, "none (the run is over: completed)");
        let open = lease_text(&record(Status::Processing, None, None), 0);
        assert_eq!(open, "none (stays processing until completed)");
        let waiting = lease_text(&record(Status::Processing, Some(60_000), Some(Default::default())), 0);
        assert!(waiting.contains("the start window of a claim no run took yet"), "{waiting}");
        let started = event_store::record::DoorClaim { started_at: Some(format_time(1)), runs: 1 };
        let running = lease_text(&record(Status::Processing, Some(60_000), Some(started)), 0);
        assert!(!running.contains("start window"), "{running}");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(42_000), "42s");
        assert_eq!(duration(61_000), "1m1s");
        assert_eq!(duration(7 * 86_400_000 - 60_000), "6d23h59m");
    }
}
