//! Property tests of the daemon-facing protocol (proptest standing in for a fuzzer): the
//! line decoder against a model for arbitrary bytes and read sizes, `Inbound::parse` on
//! arbitrary bytes, and the whole session loop on arbitrary mixes of requests, truncated
//! lines, garbage and unknown events: it never panics, only writes well-formed lines, and
//! answers every session a line identifies exactly once (never one it does not).
//!
//! Every line that could run a tool is forced onto the in-process `memory://` store, so no
//! generated input can make the plugin connect anywhere.

use crate::support::oracle;
use crate::support::{arb, property};
use dify_plugin::protocol::message::session_id_from_prefix;
use dify_plugin::protocol::{Inbound, Line, LineReader};
use event_store::{HostClock, StoreOptions};
use proptest::prelude::*;
use serde_json::{json, Value};
use stateful_tool::App;

/// Failing cases proptest found, replayed before every run.
const REGRESSIONS: &str = "tests/it/proptest-regressions/prop_protocol.txt";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn read_all(input: &[u8], capacity: usize, max: usize) -> Vec<Line> {
    let mut r = LineReader::with_limit(tokio::io::BufReader::with_capacity(capacity, input), max);
    let mut out = vec![];
    while let Some(l) = r.next_line().await.unwrap() {
        out.push(l.to_owned());
    }
    out
}

fn bytes_with_newlines() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..40),
        2 => Just(b"\n".to_vec()),
        1 => Just(b"\r\n".to_vec()),
        1 => Just(b" \t\r".to_vec()),
        1 => (1usize..300).prop_map(|n| vec![b'x'; n]),
    ];
    prop::collection::vec(piece, 0..20).prop_map(|ps| ps.concat())
}

/// The decoder against a model: split at `\n`; a line longer than the limit is reported as
/// oversize (with its length and a bounded prefix, whatever the read sizes); otherwise blank
/// lines are skipped and one trailing `\r` is dropped.
#[test]
fn line_reader_matches_its_model() {
    let rt = rt();
    property::check(
        REGRESSIONS,
        "line_reader_matches_its_model",
        2000,
        &(bytes_with_newlines(), 1usize..64, 1usize..200),
        |(input, capacity, max)| {
            let got = rt.block_on(read_all(&input, capacity, max));
            let mut pieces: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
            if input.ends_with(b"\n") || input.is_empty() {
                pieces.pop();
            }
            let expected: Vec<&[u8]> =
                pieces.into_iter().filter(|p| p.len() > max || !p.iter().all(u8::is_ascii_whitespace)).collect();
            prop_assert_eq!(got.len(), expected.len(), "{:?}", got);
            for (line, want) in got.iter().zip(expected) {
                match line {
                    Line::Complete(l) => {
                        prop_assert!(want.len() <= max);
                        prop_assert_eq!(l.as_slice(), want.strip_suffix(b"\r").unwrap_or(want));
                    }
                    Line::Oversize { prefix, len } => {
                        prop_assert!(want.len() > max);
                        prop_assert_eq!(*len, want.len());
                        prop_assert!(want.starts_with(prefix) && prefix.len() <= 4096);
                        prop_assert!(prefix.len() >= (max + 1).min(4096).min(want.len()));
                    }
                }
            }
            Ok(())
        },
    );
}

/// Parsing arbitrary bytes never panics, and a recovered session id is always a short,
/// printable, non-empty string.
#[test]
fn inbound_parse_never_panics() {
    let line = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        arb::json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        (arb::string(), arb::json()).prop_map(|(sid, data)| {
            format!(r#"{{"session_id":{},"event":"request","data":{}}}"#, json!(sid), data).into_bytes()
        }),
    ];
    property::check(REGRESSIONS, "inbound_parse_never_panics", 3000, &line, |line| {
        let _ = Inbound::parse(&line);
        if let Some(prefix_sid) = session_id_from_prefix(&line) {
            prop_assert!(!prefix_sid.is_empty() && prefix_sid.len() <= 128);
            prop_assert!(prefix_sid.chars().all(|c| c.is_ascii_graphic()));
        }
        Ok(())
    });
}

/// One input line of the session-loop test, before it gets its session id `s<i>`.
#[derive(Debug, Clone)]
enum Piece {
    Request { tool: String, params: Value, creds: Value, well_formed: bool },
    Truncated { tool: String, params: Value, cut: usize },
    Garbage(Vec<u8>),
    Json(Value),
    Event(String),
    Blank,
}

fn piece() -> impl Strategy<Value = Piece> {
    let tool = prop_oneof![
        5 => prop::sample::select(vec!["event_ingest", "event_status", "event_complete"]).prop_map(str::to_owned),
        1 => arb::string(),
    ];
    let params = || {
        prop_oneof![
            3 => arb::params().prop_map(Value::Object),
            4 => (prop::sample::select(vec!["A", "B", "🎉"]), prop::sample::select(vec!["created", "closed", "x"]))
                .prop_map(|(id, t)| json!({"event_id": id, "event_type": t, "attempt": 1})),
            1 => arb::json(),
        ]
    };
    prop_oneof![
        6 => (tool.clone(), params(), arb::memory_credentials(), prop::bool::weighted(0.8))
            .prop_map(|(tool, params, creds, well_formed)| Piece::Request { tool, params, creds, well_formed }),
        2 => (tool, params(), any::<prop::sample::Index>())
            .prop_map(|(tool, params, i)| Piece::Truncated { tool, params, cut: i.index(1000) }),
        2 => prop::collection::vec(any::<u8>(), 0..120).prop_map(Piece::Garbage),
        1 => arb::json().prop_map(Piece::Json),
        1 => prop::sample::select(vec!["backwards_response", "cancel", "heartbeat", "request", ""])
            .prop_map(|e| Piece::Event(e.to_owned())),
        1 => Just(Piece::Blank),
    ]
}

fn request_data(tool: &str, params: &Value, creds: &Value, well_formed: bool) -> Value {
    let mut data = json!({"type": "tool", "action": "invoke_tool", "provider": "stateful_tool", "tool": tool,
                          "tool_parameters": params, "credentials": creds, "user_id": "u"});
    if !well_formed {
        // A request the dispatcher must refuse: wrong action or provider, or no data object.
        data["action"] = json!("get_tool_runtime_parameters");
        data["provider"] = json!(["x"]);
    }
    data
}

fn render(i: usize, p: &Piece) -> Vec<u8> {
    let sid = format!("s{i}");
    let line = match p {
        Piece::Request { tool, params, creds, well_formed } => {
            stateful_tool::request_line(&sid, request_data(tool, params, creds, *well_formed))
        }
        Piece::Truncated { tool, params, cut } => {
            let full = stateful_tool::request_line(&sid, request_data(tool, params, &json!({}), true));
            return full.as_bytes()[..(*cut).min(full.len() - 1)].to_vec();
        }
        Piece::Garbage(b) => return b.iter().copied().filter(|&b| b != b'\n').collect(),
        Piece::Json(v) => v.to_string(),
        Piece::Event(e) => json!({"session_id": sid, "event": e, "data": {}}).to_string(),
        Piece::Blank => "  \r".to_owned(),
    };
    line.trim_end_matches('\n').as_bytes().to_vec()
}

#[test]
fn session_loop_answers_each_identified_session_exactly_once() {
    let input = (prop::collection::vec(piece(), 0..24), any::<bool>(), 1usize..300, 1usize..8);
    property::check(
        REGRESSIONS,
        "session_loop_answers_each_identified_session_exactly_once",
        400,
        &input,
        |(pieces, crlf, capacity, in_flight)| {
            let mut bytes = vec![];
            for (i, p) in pieces.iter().enumerate() {
                bytes.extend(oracle::pin_to_memory(&render(i, p)));
                bytes.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            }
            rt().block_on(oracle::check_session_loop(
                App::new(HostClock::system(), StoreOptions { allow_memory: true, ..StoreOptions::default() }),
                &bytes,
                capacity,
                in_flight,
            ))
            .map_err(TestCaseError::fail)?;
            Ok(())
        },
    );
}
