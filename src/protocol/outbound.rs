//! The plugin → daemon lines we write: `session` events (a tool answer as one buffer), `log` events.

use serde::Serialize;
use serde_json::{json, Value};

/// A `session` event line (with trailing newline):
/// `{"event":"session","session_id":…,"data":{"type":…,"data":…}}`. Written field by field
/// rather than through a `json!` wrapper, which deep-copied `data` (the whole answer) once
/// per line before serialising it.
pub fn session_line(session_id: &str, kind: &str, data: &Value) -> Vec<u8> {
    let mut line = Vec::with_capacity(192 + session_id.len());
    start_session_line(&mut line, session_id, kind);
    write_json(&mut line, data);
    line.extend_from_slice(b"}}\n");
    line
}

/// Everything of a `session` line up to its inner `data` value.
fn start_session_line(out: &mut Vec<u8>, session_id: &str, kind: &str) {
    out.extend_from_slice(b"{\"event\":\"session\",\"session_id\":");
    write_json(out, session_id);
    out.extend_from_slice(b",\"data\":{\"type\":");
    write_json(out, kind);
    out.extend_from_slice(b",\"data\":");
}

/// The lines that answer a tool call, in one buffer: the `text` message carrying the answer
/// as a JSON string (what agents read), the `json` message carrying it as an object (what
/// workflow nodes get), then the session's `end`. Byte for byte what [`session_line`] writes
/// for `{"type":"text","message":{"text":…},"meta":null}`,
/// `{"type":"json","message":{"json_object":…},"meta":null}` and `{}`, with the answer
/// serialised once instead of three times and one buffer instead of three.
pub fn answer_end_lines<T: Serialize + ?Sized>(session_id: &str, answer: &T) -> Vec<u8> {
    let mut out = Vec::new();
    write_answer_end_lines(&mut out, &mut Vec::new(), session_id, answer);
    out
}

/// [`answer_end_lines`] appended to `out`, serialising the answer in `scratch` (both are
/// reused buffers on the hot path).
pub fn write_answer_end_lines<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    session_id: &str,
    answer: &T,
) {
    scratch.clear();
    write_json(scratch, answer);
    let json = &scratch[..];
    out.reserve(3 * (96 + session_id.len()) + 2 * json.len() + json.len() / 4);
    start_session_line(out, session_id, "stream");
    out.extend_from_slice(b"{\"type\":\"text\",\"message\":{\"text\":");
    write_serialized_as_string(out, json);
    out.extend_from_slice(b"},\"meta\":null}}}\n");
    start_session_line(out, session_id, "stream");
    out.extend_from_slice(b"{\"type\":\"json\",\"message\":{\"json_object\":");
    out.extend_from_slice(json);
    out.extend_from_slice(b"},\"meta\":null}}}\n");
    start_session_line(out, session_id, "end");
    out.extend_from_slice(b"{}}}\n");
}

/// Writes `json` (compact serde_json output) as a JSON string. Such text has no control
/// characters (serde_json escapes them inside strings), so only `"` and `\` need escaping,
/// which is all serde_json's escaper would do here; text with a control character is handed
/// to that escaper instead.
fn write_serialized_as_string(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.reserve(bytes.len() + bytes.len() / 4 + 2);
    out.push(b'"');
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match ESCAPE[b as usize] {
            0 => {}
            QUOTE => {
                out.extend_from_slice(&bytes[run..i]);
                out.push(b'\\');
                run = i;
            }
            _ => {
                out.truncate(start);
                return write_json(out, std::str::from_utf8(bytes).expect("serde_json writes UTF-8"));
            }
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// `"` and `\` take a backslash; control characters need serde_json's escaper.
const QUOTE: u8 = 1;
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = 2;
        i += 1;
    }
    t[b'"' as usize] = QUOTE;
    t[b'\\' as usize] = QUOTE;
    t
};

fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value).expect("serialising a string or JSON value into memory cannot fail");
}

/// A `log` event line; the daemon logs it with the plugin's id.
pub fn log_line(level: &str, message: &str) -> Vec<u8> {
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
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

    /// What the lines were before they were written by hand: serde_json over `json!`.
    fn reference_line(sid: &str, kind: &str, data: &Value) -> String {
        let v = json!({"event": "session", "session_id": sid, "data": {"type": kind, "data": data}});
        format!("{v}\n")
    }

    #[test]
    fn session_lines_are_what_serde_json_writes_for_the_envelope() {
        let data = json!({"type": "text", "message": {"text": "a \"q\" \\ \n\u{1}é🎉"}, "meta": null, "n": 1.50});
        for (sid, kind) in [("s-1", "stream"), ("we\"ird\n", "end"), ("", "error")] {
            let line = String::from_utf8(session_line(sid, kind, &data)).unwrap();
            assert_eq!(line, reference_line(sid, kind, &data));
        }
    }

    #[test]
    fn answer_end_lines_are_the_three_session_lines() {
        let answers = [
            json!({"outcome": "accepted", "event_id": "E\"1\\\n\u{7f}é🎉\u{0}", "attempt": 1, "n": 1.50, "x": null}),
            json!({"outcome": "found", "payload": "{\"a\":\"b\\\\c\"}", "list": [1, "two", {"3": false}]}),
            json!({}),
        ];
        for answer in answers {
            let [text, object]: [Value; 2] = crate::dispatch::tool_messages(answer.clone()).try_into().unwrap();
            let expected = reference_line("sid-1", "stream", &text)
                + &reference_line("sid-1", "stream", &object)
                + &reference_line("sid-1", "end", &json!({}));
            assert_eq!(String::from_utf8(answer_end_lines("sid-1", &answer)).unwrap(), expected);
        }
    }

    #[test]
    fn serialized_json_escapes_like_serde_json_for_every_character() {
        let mut all = String::new();
        for c in (0u32..0x800).chain([0xfffd, 0x1f389]).filter_map(char::from_u32) {
            all.push(c);
        }
        for text in [serde_json::to_string(&all).unwrap(), all.clone(), "plain".to_owned(), String::new()] {
            let mut ours = Vec::new();
            write_serialized_as_string(&mut ours, text.as_bytes());
            assert_eq!(ours, serde_json::to_vec(&text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn log_lines_are_single_json_objects() {
        let l = session_line("s", "end", &json!({}));
        assert_eq!(l.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["data"], json!({"type":"end","data":{}}));
        let v: Value = serde_json::from_slice(&log_line("INFO", "a\nb")).unwrap();
        assert!(v["data"]["timestamp"].is_f64());
    }
}
