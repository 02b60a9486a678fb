//! Arbitrary bytes as the daemon's input stream: the line decoder and the whole session loop
//! never panic, every output line is JSON, and every session a line identifies ends exactly
//! once. Lines that could run a tool are pinned to the in-process `memory://` store first,
//! so no input can make the plugin connect anywhere.
#![no_main]

use std::collections::HashMap;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use stateful_tool::dispatch::App;
use stateful_tool::protocol::message::session_id_from_prefix;
use stateful_tool::protocol::wire::MAX_INPUT_LINE;
use stateful_tool::protocol::{Inbound, Line, LineReader};
use stateful_tool::runtime::stdio::serve;
use stateful_tool::runtime::ServeOptions;
use stateful_tool::store::Clock;

fn pin_to_memory(line: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(line) {
        Ok(mut v) if v.get("data").is_some_and(Value::is_object) => {
            v["data"]["credentials"] = json!({"kv_url": "memory://"});
            serde_json::to_vec(&v).unwrap()
        }
        _ => line.to_vec(),
    }
}

async fn lines(input: &[u8]) -> Vec<Line> {
    let mut r = LineReader::new(tokio::io::BufReader::with_capacity(97, input));
    let mut out = vec![];
    while let Some(l) = r.next_line().await.unwrap() {
        out.push(l);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    std::env::set_var("STATEFUL_TOOL_ALLOW_MEMORY_STORE", "1");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut input = Vec::with_capacity(data.len());
    for line in data.split(|&b| b == b'\n') {
        input.extend(pin_to_memory(line));
        input.push(b'\n');
    }
    let mut want: HashMap<String, usize> = HashMap::new();
    for line in rt.block_on(lines(&input)) {
        let sid = match line {
            Line::Oversize { prefix, len } => {
                assert!(len > MAX_INPUT_LINE);
                session_id_from_prefix(&prefix)
            }
            Line::Complete(bytes) => match Inbound::parse(&bytes) {
                Ok(m) if m.event == "backwards_response" => None,
                Ok(m) => m.session_id,
                Err(e) => e.session_id,
            },
        };
        if let Some(sid) = sid {
            *want.entry(sid).or_default() += 1;
        }
    }
    let mut out = Vec::new();
    let opts = ServeOptions { heartbeat: Duration::from_secs(3600), max_in_flight: 8 };
    rt.block_on(serve(
        tokio::io::BufReader::with_capacity(61, input.as_slice()),
        &mut out,
        App::new(Clock::system()),
        opts,
    ))
    .unwrap();
    let mut ends: HashMap<String, usize> = HashMap::new();
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line).expect("output lines are JSON");
        if v["event"] == "session" && v["data"]["type"] == "end" {
            *ends.entry(v["session_id"].as_str().unwrap().to_owned()).or_default() += 1;
        }
    }
    assert_eq!(ends, want, "every identified session ends exactly once");
});
