//! What the trigger writes back: the raw HTTP answer (hex) inside dispatch's chunk, the
//! payload dispatch hands to invoke, and invoke's `variables`, each kept well under the
//! daemon's 5 MiB line limit.

use serde_json::{json, Map, Value};

use super::raw::RawRequest;
use super::verdict::Verdict;
use super::EVENT;

/// Most body text carried to the workflow (UTF-8, cut on a character boundary).
pub(crate) const MAX_BODY_TEXT: usize = 1024 * 1024;

/// Upper bound of a serialised payload / variables object: with the envelope around it, a
/// reply line stays far below the daemon's 5 MiB limit (a longer one kills the plugin).
pub(crate) const MAX_VARIABLES_JSON: usize = 3 * 1024 * 1024;

/// The variables `invoke_trigger_event` returns, as declared in the event's `output_schema`.
pub(crate) const VARIABLES: [&str; 11] = [
    "delivery_id",
    "event_type",
    "attempt",
    "claimed_at",
    "lease_until",
    "headers",
    "body_json",
    "body_text",
    "body_truncated",
    "content_type",
    "key",
];

/// Dispatch's payload: the claim's fields plus the request as the workflow sees it. Dify
/// stores it and hands it back to invoke verbatim (invoke's own raw request may have lost
/// the body: capture S4).
pub(crate) fn payload(req: &RawRequest, body_json: Option<Value>, claim: Value) -> Map<String, Value> {
    let mut out = claim.as_object().cloned().unwrap_or_default();
    out.insert("headers".into(), Value::Object(req.lower_headers()));
    out.insert("content_type".into(), json!(req.content_type()));
    let text = String::from_utf8_lossy(&req.body);
    let cut = floor_char_boundary(&text, MAX_BODY_TEXT);
    let mut truncated = cut < text.len();
    out.insert("body_text".into(), json!(&text[..cut]));
    // The parsed body only when all of it is carried: a partial object would mislead.
    out.insert("body_json".into(), if truncated { Value::Null } else { body_json.unwrap_or(Value::Null) });
    // Escapes can make the JSON text several times the body: shrink until it fits.
    while serde_json::to_vec(&out).map_or(0, |v| v.len()) > MAX_VARIABLES_JSON {
        truncated = true;
        out.insert("body_json".into(), Value::Null);
        let text = out["body_text"].as_str().unwrap_or_default().to_owned();
        let half = floor_char_boundary(&text, text.len() / 2);
        out.insert("body_text".into(), json!(&text[..half]));
    }
    out.insert("body_truncated".into(), json!(truncated));
    out
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// Invoke's variables: every declared one, from the payload dispatch gave; a payload that is
/// missing or from elsewhere still yields all of them (never `null`: Dify would drop the run).
pub(crate) fn variables(payload: &Value, raw_hex: Option<&str>) -> Map<String, Value> {
    let mut source = payload.as_object().cloned().unwrap_or_default();
    if !source.contains_key("headers") {
        // No payload from our dispatch (e.g. a run Dify replayed): read what the request holds.
        if let Some(req) = raw_hex.and_then(|h| RawRequest::from_hex(h).ok()) {
            let body_json = serde_json::from_slice(&req.body).ok();
            for (k, v) in payload_of(&req, body_json) {
                source.entry(k).or_insert(v);
            }
        }
    }
    let mut out = Map::new();
    for name in VARIABLES {
        let value = source.remove(name).unwrap_or(Value::Null);
        let value = match (name, value) {
            ("attempt", v) => json!(v.as_u64().unwrap_or(0)),
            ("body_truncated", v) => json!(v.as_bool().unwrap_or(false)),
            ("headers", Value::Object(m)) => Value::Object(m),
            ("headers", _) => json!({}),
            ("body_json", v @ Value::Object(_)) => v,
            ("body_json", _) => Value::Null,
            ("lease_until", v @ Value::String(_)) => v,
            ("lease_until", _) => Value::Null,
            (_, Value::String(s)) => Value::String(s),
            (_, _) => json!(""),
        };
        out.insert(name.to_owned(), value);
    }
    out
}

fn payload_of(req: &RawRequest, body_json: Option<Value>) -> Map<String, Value> {
    payload(req, body_json, json!({}))
}

/// Raw HTTP/1.1 response bytes for the sender (Dify parses them back: status from the second
/// token, headers, body after the blank line).
pub(crate) fn http_response(v: &Verdict) -> Vec<u8> {
    let mut body = Map::new();
    body.insert("status".into(), json!(if v.status < 300 { "ok" } else { "error" }));
    body.insert("outcome".into(), json!(v.outcome));
    body.insert("message".into(), json!(v.message));
    for (k, val) in &v.fields {
        body.insert(k.clone(), val.clone());
    }
    let body = serde_json::to_vec(&body).expect("JSON serialises");
    let mut out = format!("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\n", v.status, reason(v.status));
    out.push_str(&format!("Content-Length: {}\r\nX-Dedup-Outcome: {}\r\n", body.len(), v.outcome));
    if let Some(s) = v.retry_after {
        out.push_str(&format!("Retry-After: {s}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        409 => "Conflict",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Dispatch's one stream chunk. `events` is always a list (never null: Dify answers 400),
/// and empty unless the delivery was claimed here: a 503 with events would still start a run.
pub(crate) fn dispatch_chunk(v: &Verdict) -> Value {
    let events: Vec<&str> = if v.start { vec![EVENT] } else { Vec::new() };
    json!({
        "user_id": "",
        "events": events,
        "response": hex::encode(http_response(v)),
        "payload": Value::Object(if v.start { v.payload.clone() } else { Map::new() }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: &[u8]) -> RawRequest {
        RawRequest::parse(
            [b"POST / HTTP/1.1\r\nContent-Type: application/json\r\nX-A: 1\r\n\r\n".as_ref(), body].concat(),
        )
    }

    #[test]
    fn small_bodies_are_carried_whole() {
        let p = payload(&req(br#"{"a":1}"#), Some(json!({"a": 1})), json!({"delivery_id": "d"}));
        assert_eq!(
            (p["body_text"].as_str(), &p["body_json"], &p["body_truncated"]),
            (Some(r#"{"a":1}"#), &json!({"a": 1}), &json!(false))
        );
        assert_eq!(p["headers"]["x-a"], "1");
        assert_eq!(p["content_type"], "application/json");
    }

    #[test]
    fn big_or_escape_heavy_bodies_are_truncated_and_say_so() {
        let big = vec![b'a'; MAX_BODY_TEXT + 10];
        let p = payload(&req(&big), None, json!({}));
        assert_eq!((p["body_text"].as_str().unwrap().len(), &p["body_truncated"]), (MAX_BODY_TEXT, &json!(true)));
        // Control bytes serialise as \u00XX, six bytes each: the payload still fits.
        let escapes = vec![1u8; MAX_BODY_TEXT];
        let p = payload(&req(&escapes), None, json!({}));
        assert!(serde_json::to_vec(&p).unwrap().len() <= MAX_VARIABLES_JSON);
        assert_eq!(p["body_truncated"], true);
        // A multi-byte character is never cut in half.
        let text = "é".repeat(MAX_BODY_TEXT);
        let p = payload(&req(text.as_bytes()), None, json!({}));
        assert!(p["body_text"].as_str().unwrap().chars().all(|c| c == 'é'));
    }

    #[test]
    fn variables_are_all_there_whatever_the_payload() {
        for payload in [json!({}), Value::Null, json!({"attempt": "x", "headers": 3, "body_json": [1]})] {
            let v = variables(&payload, None);
            assert_eq!(v.keys().map(String::as_str).collect::<Vec<_>>(), VARIABLES, "{payload}");
            assert_eq!((&v["headers"], &v["body_json"], &v["attempt"]), (&json!({}), &Value::Null, &json!(0)));
        }
        let raw = hex::encode(b"POST / HTTP/1.1\r\nX-Github-Delivery: d\r\n\r\n{\"k\":true}");
        let v = variables(&json!({}), Some(&raw));
        assert_eq!((&v["headers"]["x-github-delivery"], &v["body_json"]), (&json!("d"), &json!({"k": true})));
    }

    #[test]
    fn responses_parse_as_dify_parses_them() {
        let mut v = Verdict::refuse(503, "store_unavailable", "retry later");
        v.retry_after = Some(5);
        let bytes = http_response(&v);
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(head.split(' ').nth(1), Some("503"));
        assert!(head.contains("\r\nRetry-After: 5"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        let chunk = dispatch_chunk(&v);
        assert_eq!((&chunk["events"], &chunk["payload"], &chunk["user_id"]), (&json!([]), &json!({}), &json!("")));
    }
}
