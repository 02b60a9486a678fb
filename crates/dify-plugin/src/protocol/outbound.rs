//! The plugin → daemon lines we write: `session` events (a tool answer as one buffer), `log` events.

use std::ops::Range;

use serde::Serialize;
use serde_json::Value;

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

/// One member of a written answer object: its name, and where its value's JSON lies in the
/// buffer the object was written to.
pub type Member<'a> = (&'a str, Range<usize>);

/// What the writer needs of a tool's answer, without this module knowing the tools.
pub trait ToolAnswer {
    /// Appends the `text` message's text (one plain sentence, UTF-8) to `out`.
    fn write_text(&self, out: &mut Vec<u8>);
    /// The names of the tool's declared outputs, one `variable` message each.
    fn output_names(&self) -> &'static [String];
    /// Appends the answer object (the `json` message's `json_object`) to `out` as JSON, and
    /// lists its members in `members` in the order written. Each `variable` message copies
    /// its output's value from there (`null` for an output the object lacks), so no value
    /// is serialised twice.
    fn write_json<'a>(&'a self, out: &mut Vec<u8>, members: &mut Vec<Member<'a>>);
    /// Appends the record an agent's model reads: by default the whole answer; a tool's
    /// answer leaves out what a model cannot use.
    fn write_agent_json(&self, out: &mut Vec<u8>) {
        self.write_json(out, &mut Vec::new());
    }
}

/// The lines that answer a tool call, in one buffer: the `text` message (a sentence for
/// people and agents), the `json` message (the answer object), for callers that read them
/// one `variable` message per declared output (what a workflow tool node turns into its
/// named outputs), then the session's `end`. `variables` is false for agents (an agent app
/// or an Agent node's strategy): Dify joins their text and JSON with nothing between, so
/// their sentence ends with a line break, and their JSON is [`ToolAnswer::write_agent_json`]. Byte for byte what [`session_line`] writes for
/// `{"type":"text","message":{"text":…},"meta":null}`,
/// `{"type":"json","message":{"json_object":…},"meta":null}`,
/// `{"type":"variable","message":{"variable_name":…,"variable_value":…,"stream":false},"meta":null}`
/// and `{}`, with the answer serialised once into one buffer.
pub fn answer_end_lines<T: ToolAnswer + ?Sized>(session_id: &str, answer: &T, variables: bool) -> Vec<u8> {
    let mut out = Vec::new();
    write_answer_end_lines(&mut out, &mut Vec::new(), session_id, answer, variables);
    out
}

/// [`answer_end_lines`] appended to `out`, serialising the answer and its sentence in
/// `scratch` (both are reused buffers on the hot path).
pub fn write_answer_end_lines<T: ToolAnswer + ?Sized>(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    session_id: &str,
    answer: &T,
    variables: bool,
) {
    scratch.clear();
    let outputs = if variables { answer.output_names() } else { &[] };
    let mut members = Vec::with_capacity(outputs.len() + outputs.len() / 2);
    if variables {
        answer.write_json(scratch, &mut members);
    } else {
        answer.write_agent_json(scratch);
    }
    let json_len = scratch.len();
    answer.write_text(scratch);
    let (json, text) = scratch.split_at(json_len);
    let envelope = 96 + session_id.len();
    out.reserve((3 + outputs.len()) * envelope + 2 * json.len() + text.len() + text.len() / 8);
    // Every stream line starts alike: escape the session id once and copy that start.
    let start = out.len();
    start_session_line(out, session_id, "stream");
    let stream_start = start..out.len();
    out.extend_from_slice(b"{\"type\":\"text\",\"message\":{\"text\":");
    write_json_string(out, text);
    if !variables {
        // The closing quote gives way to an escaped line break (no control character goes
        // through write_json_string's slow path).
        out.pop();
        out.extend_from_slice(b"\\n\"");
    }
    out.extend_from_slice(b"},\"meta\":null}}}\n");
    out.extend_from_within(stream_start.clone());
    out.extend_from_slice(b"{\"type\":\"json\",\"message\":{\"json_object\":");
    out.extend_from_slice(json);
    out.extend_from_slice(b"},\"meta\":null}}}\n");
    let mut next = 0;
    for name in outputs {
        out.extend_from_within(stream_start.clone());
        out.extend_from_slice(b"{\"type\":\"variable\",\"message\":{\"variable_name\":");
        write_json_string(out, name.as_bytes());
        out.extend_from_slice(b",\"variable_value\":");
        match find_member(&members, name, &mut next) {
            Some(value) => out.extend_from_slice(&json[value]),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"stream\":false},\"meta\":null}}}\n");
    }
    start_session_line(out, session_id, "end");
    out.extend_from_slice(b"{}}}\n");
}

/// Where member `name`'s value lies. Declared outputs mostly follow the object's order, so the
/// search starts after the previous match (`next`) and wraps around: about one comparison
/// per output instead of a scan from the start.
fn find_member(members: &[Member<'_>], name: &str, next: &mut usize) -> Option<Range<usize>> {
    let n = members.len();
    (0..n).map(|k| (*next + k) % n).find(|&i| members[i].0 == name).map(|i| {
        *next = i + 1;
        members[i].1.clone()
    })
}

/// Writes UTF-8 `bytes` as a JSON string. Text without control characters (compact
/// serde_json output, our sentences) only needs `"` and `\` escaped, which is all
/// serde_json's escaper would do; text with a control character is handed to that escaper.
fn write_json_string(out: &mut Vec<u8>, bytes: &[u8]) {
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
                return write_json(out, &String::from_utf8_lossy(bytes));
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
#[cfg(feature = "logging")]
pub(crate) fn log_line(level: &str, message: &str) -> Vec<u8> {
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let mut line = serde_json::to_vec(&serde_json::json!({
        "event": "log",
        "data": { "level": level, "message": message, "timestamp": ts },
    }))
    .expect("serialising a JSON value cannot fail");
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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

    /// An answer with a given object, sentence and outputs (the tools' own is tested there).
    struct Fixed(Value, &'static str, Vec<String>);

    impl Serialize for Fixed {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.serialize(s)
        }
    }

    impl ToolAnswer for Fixed {
        fn write_json<'a>(&'a self, out: &mut Vec<u8>, members: &mut Vec<Member<'a>>) {
            let Some(object) = self.0.as_object() else { return write_json(out, self) };
            out.push(b'{');
            for (i, (name, value)) in object.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, name);
                out.push(b':');
                let start = out.len();
                write_json(out, value);
                members.push((name, start..out.len()));
            }
            out.push(b'}');
        }
        fn write_text(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(self.1.as_bytes());
        }
        fn output_names(&self) -> &'static [String] {
            Vec::leak(self.2.clone())
        }
    }

    #[test]
    fn answer_end_lines_are_session_lines_of_the_documented_messages() {
        let answers = [
            json!({"outcome": "accepted", "event_id": "E\"1\\\n\u{7f}é🎉\u{0}", "attempt": 1, "n": 1.50, "x": null}),
            json!({"outcome": "found", "payload": "{\"a\":\"b\\\\c\"}", "list": [1, "two", {"3": false}]}),
            json!({}),
        ];
        let outputs: Vec<String> = ["attempt", "outcome", "x", "missing", "list", "outcome"].map(String::from).into();
        for (answer, text) in answers.into_iter().zip(["Event \"E\" is new: \\ é🎉.", "", "tab\there"]) {
            let fixed = Fixed(answer.clone(), text, outputs.clone());
            for variables in [false, true] {
                let shown = if variables { text.to_owned() } else { format!("{text}\n") };
                let mut expected = reference_line(
                    "sid-1",
                    "stream",
                    &json!({"type": "text", "message": {"text": shown}, "meta": null}),
                ) + &reference_line(
                    "sid-1",
                    "stream",
                    &json!({"type": "json", "message": {"json_object": answer}, "meta": null}),
                );
                for name in outputs.iter().filter(|_| variables) {
                    let value = answer.get(name.as_str()).cloned().unwrap_or(Value::Null);
                    let message = json!({"variable_name": name, "variable_value": value, "stream": false});
                    expected += &reference_line(
                        "sid-1",
                        "stream",
                        &json!({"type": "variable", "message": message, "meta": null}),
                    );
                }
                expected += &reference_line("sid-1", "end", &json!({}));
                let ours = String::from_utf8(answer_end_lines("sid-1", &fixed, variables)).unwrap();
                assert_eq!(ours, expected);
            }
        }
    }

    #[test]
    fn json_strings_escape_like_serde_json_for_every_character() {
        let mut all = String::new();
        for c in (0u32..0x800).chain([0xfffd, 0x1f389]).filter_map(char::from_u32) {
            all.push(c);
        }
        for text in [serde_json::to_string(&all).unwrap(), all.clone(), "plain".to_owned(), String::new()] {
            let mut ours = Vec::new();
            write_json_string(&mut ours, text.as_bytes());
            assert_eq!(ours, serde_json::to_vec(&text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn session_lines_are_single_json_objects() {
        let l = session_line("s", "end", &json!({}));
        assert_eq!(l.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["data"], json!({"type":"end","data":{}}));
    }

    #[cfg(feature = "logging")]
    #[test]
    fn log_lines_are_single_json_objects() {
        let v: Value = serde_json::from_slice(&log_line("INFO", "a\nb")).unwrap();
        assert!(v["data"]["timestamp"].is_f64());
    }
}
