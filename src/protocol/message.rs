//! Shapes of daemon → plugin lines and the plugin → daemon events we emit.

use serde::Deserialize;
use serde_json::{json, Value};

/// A daemon → plugin line (`pluginInStreamMessage`): only the fields we act on.
#[derive(Debug, Deserialize)]
pub struct Inbound {
    pub session_id: Option<String>,
    pub event: String,
    pub data: Option<Value>,
    #[serde(default)]
    pub app_id: Option<String>,
}

/// Why an input line could not be taken as a request; `session_id` is set when it was
/// readable, so that session can still be answered.
#[derive(Debug)]
pub struct InboundError {
    pub session_id: Option<String>,
    pub message: String,
}

impl Inbound {
    pub fn parse(line: &[u8]) -> Result<Inbound, InboundError> {
        let value: Value = serde_json::from_slice(line).map_err(|e| InboundError {
            session_id: session_id_from_prefix(line),
            message: format!("input line is not valid JSON: {e}"),
        })?;
        let session_id = value
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        serde_json::from_value::<Inbound>(value).map_err(|e| InboundError {
            session_id,
            message: format!("input line is not a daemon message: {e}"),
        })
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
    id.chars()
        .all(|c| c.is_ascii_graphic())
        .then(|| id.to_owned())
}

/// The heartbeat line, exactly as the SDK writes it.
pub const HEARTBEAT: &[u8] = b"{\"event\":\"heartbeat\",\"session_id\":null,\"data\":{}}\n";

/// A `session` event line (with trailing newline).
pub fn session_line(session_id: &str, kind: &str, data: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({
        "event": "session",
        "session_id": session_id,
        "data": { "type": kind, "data": data },
    }))
    .expect("serialising a JSON value cannot fail");
    line.push(b'\n');
    line
}

/// A `log` event line; the daemon logs it with the plugin's id.
pub fn log_line(level: &str, message: &str) -> Vec<u8> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut line = serde_json::to_vec(&json!({
        "event": "log",
        "data": { "level": level, "message": message, "timestamp": ts },
    }))
    .expect("serialising a JSON value cannot fail");
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_envelope() {
        let line = br#"{"session_id":"s1","conversation_id":null,"message_id":null,"app_id":"a","endpoint_id":null,"context":null,"event":"request","data":{"action":"x"}}"#;
        let m = Inbound::parse(line).unwrap();
        assert_eq!(m.session_id.as_deref(), Some("s1"));
        assert_eq!(m.event, "request");
        assert_eq!(m.data.unwrap()["action"], "x");
    }

    #[test]
    fn non_json_with_readable_session_id_keeps_it() {
        let e =
            Inbound::parse(br#"{"session_id": "abc-1", "event":"request", "data": {"#).unwrap_err();
        assert_eq!(e.session_id.as_deref(), Some("abc-1"));
        let e = Inbound::parse(b"this is not json").unwrap_err();
        assert_eq!(e.session_id, None);
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

    #[test]
    fn lines_are_single_json_objects() {
        let l = session_line("s", "end", &json!({}));
        assert_eq!(l.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["data"], json!({"type":"end","data":{}}));
        let v: Value = serde_json::from_slice(&log_line("INFO", "a\nb")).unwrap();
        assert!(v["data"]["timestamp"].is_f64());
    }
}
