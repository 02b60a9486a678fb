//! The request line exactly as Dify's plugin daemon writes it: what `stateful-tool call`, the
//! bench and the tests send the plugin.

use serde_json::{json, Value};

/// The request line exactly as the Go daemon writes it: envelope fields in struct order,
/// `data` keys sorted, compact; no `app_id` or `message_id` (a backwards invocation).
pub fn request_line(session_id: &str, data: Value) -> String {
    request_line_from(session_id, data, None, None)
}

/// [`request_line`] with the envelope's `app_id` and `message_id` (how Dify's callers differ).
pub fn request_line_from(session_id: &str, data: Value, app_id: Option<&str>, message_id: Option<&str>) -> String {
    let sorted: std::collections::BTreeMap<String, Value> = match data {
        Value::Object(m) => m.into_iter().collect(),
        _ => Default::default(),
    };
    let mut line = format!(
        r#"{{"session_id":{},"conversation_id":null,"message_id":{},"app_id":{},"endpoint_id":null,"context":null,"event":"request","data":{}}}"#,
        json!(session_id),
        json!(message_id),
        json!(app_id),
        serde_json::to_string(&sorted).expect("JSON map serialises")
    );
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_matches_the_daemon_layout() {
        let l = request_line("s", json!({"user_id": "u", "action": "invoke_tool", "type": "tool"}));
        assert_eq!(
            l,
            "{\"session_id\":\"s\",\"conversation_id\":null,\"message_id\":null,\"app_id\":null,\"endpoint_id\":null,\"context\":null,\"event\":\"request\",\"data\":{\"action\":\"invoke_tool\",\"type\":\"tool\",\"user_id\":\"u\"}}\n"
        );
    }
}
