//! What the benchmark sends: event ids, webhook-like payloads, daemon request lines, records.

use event_store::key::storage_key;
use event_store::record::{fingerprint, format_time, new_claim_id, Record, Status};
use serde_json::{json, Value};
use stateful_tool::{request_line, request_line_from};

/// Store-side TTL both the plugin (default `retention` credential, 7 days) and the raw
/// clients send, so raw claims do exactly the store work a plugin claim does.
pub(crate) const TTL_MS: u64 = 7 * 24 * 3600 * 1000;

/// The lease every ingest asks for (the README's workflow sets one); long enough that no
/// lease expires between a run's ingest and duplicate phases, which would turn duplicates
/// into re-claims.
pub(crate) const LEASE_SECONDS: i64 = 3600;

/// A realistic webhook body (~300 bytes): the plugin parses and canonicalises it to
/// fingerprint it, which is part of the work being measured.
pub(crate) fn payload(i: usize) -> String {
    json!({
        "id": format!("evt_{i:010}"),
        "type": "order.updated",
        "created": 1_780_000_000 + i,
        "data": {
            "order_id": 4_200_000 + i,
            "customer": {"id": format!("cus_{:08x}", i * 7919), "email": format!("buyer{i}@example.com")},
            "items": [{"sku": "SKU-1042", "qty": 2, "price": "19.90"}, {"sku": "SKU-7", "qty": 1, "price": "5.00"}],
            "currency": "EUR",
            "total": "44.80",
        },
    })
    .to_string()
}

/// Event ids of one run: distinct per (backend, phase prefix, concurrency) so runs never
/// collide in a store that lives across runs.
pub(crate) fn event_ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:08}")).collect()
}

/// The session id of request `i` of run `run`: UUID-shaped like the daemon's, and the
/// reader recovers both numbers from it without a map look-up.
pub(crate) fn session_id(run: u32, i: usize) -> String {
    format!("{run:08x}-0000-4000-8000-{i:012x}")
}

/// Inverse of [`session_id`].
pub(crate) fn parse_session_id(sid: &[u8]) -> Option<(u32, usize)> {
    if sid.len() != 36 {
        return None;
    }
    let run = u32::from_str_radix(std::str::from_utf8(&sid[..8]).ok()?, 16).ok()?;
    let i = usize::from_str_radix(std::str::from_utf8(&sid[24..]).ok()?, 16).ok()?;
    Some((run, i))
}

fn invoke(tool: &str, kv_url: &str, params: Value) -> Value {
    json!({
        "action": "invoke_tool", "credential_type": "api-key", "credentials": {"kv_url": kv_url},
        "provider": "stateful_tool", "tool": tool, "tool_parameters": params, "type": "tool", "user_id": "bench",
    })
}

/// `event_ingest` request lines, byte for byte as the daemon writes them.
pub(crate) fn ingest_lines(run: u32, kv_url: &str, ids: &[String]) -> Vec<Vec<u8>> {
    ingest_lines_from(run, kv_url, ids, None, None)
}

/// [`ingest_lines`] with the envelope's `app_id` and `message_id`, which tell the plugin who
/// called (a workflow node: `app_id` only; an agent app: both).
pub(crate) fn ingest_lines_from(
    run: u32,
    kv_url: &str,
    ids: &[String],
    app_id: Option<&str>,
    message_id: Option<&str>,
) -> Vec<Vec<u8>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let params =
                json!({"event_id": id, "event_type": "updated", "payload": payload(i), "lease_seconds": LEASE_SECONDS});
            request_line_from(&session_id(run, i), invoke("event_ingest", kv_url, params), app_id, message_id)
                .into_bytes()
        })
        .collect()
}

/// A GitHub-like delivery of id `id` (headers as Dify's WSGI server writes them), in hex as
/// Dify hands it to the trigger.
fn webhook_hex(i: usize, id: &str) -> String {
    let body = payload(i);
    let head = format!(
        "POST /triggers/plugin/0c1e2f3a-0000-4000-8000-000000000001 HTTP/1.1\r\nHost: dify\r\n\
         Content-Type: application/json\r\nUser-Agent: GitHub-Hookshot/bench\r\nX-Github-Delivery: {id}\r\n\
         X-Github-Event: push\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut out = String::with_capacity(2 * (head.len() + body.len()));
    for b in head.bytes().chain(body.bytes()) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The trigger subscription the door lines use: unsigned GitHub ids, the bench's store.
fn subscription(kv_url: &str) -> Value {
    json!({"endpoint": "https://dify.example/triggers/plugin/0c1e2f3a-0000-4000-8000-000000000001",
           "expires_at": -1, "parameters": {},
           "properties": {"kv_url": kv_url, "signature_scheme": "none", "event_type_header": "X-GitHub-Event",
                          "lease_seconds": LEASE_SECONDS.to_string()}})
}

/// `dispatch_trigger_event` request lines: one new delivery each, as Dify sends them.
pub(crate) fn dispatch_lines(run: u32, kv_url: &str, ids: &[String]) -> Vec<Vec<u8>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let data = json!({
                "action": "dispatch_trigger_event", "credential_type": "unauthorized", "credentials": {},
                "provider": "stateful_trigger", "raw_http_request": webhook_hex(i, id),
                "subscription": subscription(kv_url), "type": "trigger", "user_id": "",
            });
            request_line(&session_id(run, i), data).into_bytes()
        })
        .collect()
}

/// `invoke_trigger_event` request lines for deliveries already dispatched (attempt 1): the
/// payload dispatch returns for them, as Dify hands it back.
pub(crate) fn invoke_lines(run: u32, kv_url: &str, ids: &[String]) -> Vec<Vec<u8>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let body: Value = serde_json::from_str(&payload(i)).expect("the bench's payload is JSON");
            let payload = json!({
                "delivery_id": id, "event_type": "push", "attempt": 1, "claimed_at": "2026-12-04 12:00:00 UTC",
                "lease_until": "2026-12-04 12:01:00 UTC", "key": storage_key(None, id),
                "headers": {"content-type": "application/json", "x-github-delivery": id, "x-github-event": "push"},
                "content_type": "application/json", "body_text": payload(i), "body_json": body, "body_truncated": false,
            });
            let data = json!({
                "action": "invoke_trigger_event", "credential_type": "unauthorized", "credentials": {},
                "event": "webhook_received", "parameters": {}, "payload": payload, "provider": "stateful_trigger",
                "raw_http_request": "", "subscription": subscription(kv_url), "type": "trigger", "user_id": "",
            });
            request_line(&session_id(run, i), data).into_bytes()
        })
        .collect()
}

/// `event_status` request lines.
pub(crate) fn status_lines(run: u32, kv_url: &str, ids: &[String]) -> Vec<Vec<u8>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            request_line(&session_id(run, i), invoke("event_status", kv_url, json!({"event_id": id}))).into_bytes()
        })
        .collect()
}

/// Storage keys exactly as the plugin names them (no namespace).
pub(crate) fn keys(ids: &[String]) -> Vec<String> {
    ids.iter().map(|id| storage_key(None, id)).collect()
}

/// A record like the one the plugin stores for event `ids[0]`: same fields, same size
/// (± a digit), so the raw clients move the same bytes per claim.
pub(crate) fn record_value(id: &str) -> Vec<u8> {
    let now = 1_780_000_000_000;
    let body = payload(0);
    Record {
        v: 1,
        event_id: id.to_owned(),
        event_type: "updated".into(),
        fingerprint: fingerprint("updated", Some(&body)),
        payload: Some(body),
        status: Status::Processing,
        received_at: format_time(now),
        updated_at: format_time(now),
        attempt: 1,
        lease_until_ms: Some(now + LEASE_SECONDS * 1000),
        completed_at: None,
        result: None,
        claim_id: new_claim_id(),
        run_id: None,
        door: None,
    }
    .to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_round_trip() {
        let sid = session_id(0xdead_beef, 123_456);
        assert_eq!(sid.len(), 36);
        assert_eq!(parse_session_id(sid.as_bytes()), Some((0xdead_beef, 123_456)));
        assert_eq!(parse_session_id(b"nope"), None);
    }

    #[test]
    fn lines_are_daemon_requests() {
        let ids = event_ids("p", 2);
        let lines = ingest_lines(7, "http://x", &ids);
        let v: Value = serde_json::from_slice(&lines[1]).unwrap();
        assert_eq!(v["event"], "request");
        assert_eq!(v["data"]["tool_parameters"]["event_id"], "p-00000001");
        assert_eq!(lines[1].last(), Some(&b'\n'));
        assert!(record_value("p-00000000").len() > 400);
    }
}
