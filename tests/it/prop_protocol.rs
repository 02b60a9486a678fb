//! Property tests of the daemon-facing protocol (proptest standing in for a fuzzer): the
//! line decoder against a model for arbitrary bytes and read sizes, `Inbound::parse` on
//! arbitrary bytes, and the whole session loop on arbitrary mixes of requests, truncated
//! lines, garbage and unknown events: it never panics, only writes well-formed lines, and
//! answers every session a line identifies exactly once (never one it does not).
//!
//! Every line that could run a tool is forced onto the in-process `memory://` store, so no
//! generated input can make the plugin connect anywhere.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::arb;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};
use stateful_tool::dispatch::App;
use stateful_tool::logging::LogRoute;
use stateful_tool::protocol::message::session_id_from_prefix;
use stateful_tool::protocol::wire::MAX_INPUT_LINE;
use stateful_tool::protocol::{Inbound, Line, LineReader};
use stateful_tool::runtime::session_loop::serve;
use stateful_tool::runtime::ServeOptions;
use stateful_tool::store::Clock;

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

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
    runner(2000)
        .run(&(bytes_with_newlines(), 1usize..64, 1usize..200), |(input, capacity, max)| {
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
        })
        .unwrap();
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
    runner(3000)
        .run(&line, |line| {
            let _ = Inbound::parse(&line);
            if let Some(prefix_sid) = session_id_from_prefix(&line) {
                prop_assert!(!prefix_sid.is_empty() && prefix_sid.len() <= 128);
                prop_assert!(prefix_sid.chars().all(|c| c.is_ascii_graphic()));
            }
            Ok(())
        })
        .unwrap();
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
            stateful_tool::call::request_line(&sid, request_data(tool, params, creds, *well_formed))
        }
        Piece::Truncated { tool, params, cut } => {
            let full = stateful_tool::call::request_line(&sid, request_data(tool, params, &json!({}), true));
            return full.as_bytes()[..(*cut).min(full.len() - 1)].to_vec();
        }
        Piece::Garbage(b) => return b.iter().copied().filter(|&b| b != b'\n').collect(),
        Piece::Json(v) => v.to_string(),
        Piece::Event(e) => json!({"session_id": sid, "event": e, "data": {}}).to_string(),
        Piece::Blank => "  \r".to_owned(),
    };
    line.trim_end_matches('\n').as_bytes().to_vec()
}

/// Any line that parses into something with a `data` object gets its credentials pinned to
/// the in-process store: the plugin can only run a tool from a line it can parse.
fn pin_to_memory(line: Vec<u8>) -> Vec<u8> {
    match serde_json::from_slice::<Value>(&line) {
        Ok(mut v) if v.get("data").is_some_and(Value::is_object) => {
            v["data"]["credentials"] = json!({"kv_url": "memory://"});
            serde_json::to_vec(&v).unwrap()
        }
        _ => line,
    }
}

/// How many answers each session id must get: one per line that identifies it.
fn expected_answers(input: &[u8]) -> HashMap<String, usize> {
    let lines = rt().block_on(read_all(input, 8192, MAX_INPUT_LINE));
    let mut want = HashMap::new();
    for line in lines {
        let sid = match line {
            Line::Oversize { prefix, .. } => session_id_from_prefix(&prefix),
            Line::Complete(bytes) => match Inbound::parse(&bytes) {
                Ok(m) if m.event == "backwards_response" => None,
                Ok(m) => m.session_id,
                Err(e) => e.session_id,
            },
        };
        if let Some(sid) = sid {
            *want.entry(sid).or_insert(0) += 1;
        }
    }
    want
}

#[test]
fn session_loop_answers_each_identified_session_exactly_once() {
    std::env::set_var("STATEFUL_TOOL_ALLOW_MEMORY_STORE", "1");
    let input = (prop::collection::vec(piece(), 0..24), any::<bool>(), 1usize..300, 1usize..8);
    runner(400)
        .run(&input, |(pieces, crlf, capacity, in_flight)| {
            let mut bytes = vec![];
            for (i, p) in pieces.iter().enumerate() {
                bytes.extend(pin_to_memory(render(i, p)));
                bytes.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            }
            let want = expected_answers(&bytes);
            let mut out = Vec::new();
            let opts =
                ServeOptions { heartbeat: Duration::from_secs(3600), max_in_flight: in_flight, logs: LogRoute::Stderr };
            rt().block_on(serve(
                tokio::io::BufReader::with_capacity(capacity, bytes.as_slice()),
                &mut out,
                App::new(Clock::system()),
                opts,
            ))
            .unwrap();
            let mut ends: HashMap<String, usize> = HashMap::new();
            let mut errors: HashMap<String, usize> = HashMap::new();
            for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let v: Value = serde_json::from_slice(line).expect("every output line is JSON");
                let event = v["event"].as_str().unwrap_or("");
                prop_assert!(["heartbeat", "log", "session"].contains(&event), "{v}");
                if event != "session" {
                    continue;
                }
                let sid = v["session_id"].as_str().expect("a session line names its session").to_owned();
                prop_assert!(want.contains_key(&sid), "an answer for a session no line identified: {v}");
                match v["data"]["type"].as_str() {
                    Some("end") => *ends.entry(sid).or_default() += 1,
                    Some("error") => {
                        prop_assert!(v["data"]["data"]["error_type"].is_string(), "{v}");
                        *errors.entry(sid).or_default() += 1
                    }
                    Some("stream") => {}
                    other => prop_assert!(false, "unknown session message type {other:?}"),
                }
            }
            prop_assert_eq!(&ends, &want, "every identified session ends exactly once");
            for (sid, n) in errors {
                prop_assert!(n <= want[&sid], "{sid}: more errors than sessions");
            }
            Ok(())
        })
        .unwrap();
}
