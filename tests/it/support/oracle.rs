//! What a correct plugin does with arbitrary input: the checks the property tests
//! (`tests/it/prop_*.rs`) and the fuzz targets (`fuzz/`, which include this file by path)
//! share, so the two cannot drift apart. Test code: it is not part of the plugin.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use dify_plugin::protocol::message::session_id_from_prefix;
use dify_plugin::protocol::wire::MAX_INPUT_LINE;
use dify_plugin::protocol::{Inbound, Line, LineReader};
use dify_plugin::runtime::session_loop::serve;
use dify_plugin::runtime::ServeOptions;
use event_store::key::{is_key_charset_safe, parse_storage_key, storage_key};
use event_store::memory::MemoryStore;
use event_store::{
    Created, Current, EventStore, HostClock, Probe, Rollback, StoreClock, StoreError, Swapped, Version, Write,
};
use stateful_tool::{App, ErrorClass, ToolError};

/// A line that parses into something with a `data` object, with its credentials pinned to the
/// in-process `memory://` store: no generated input can make the plugin connect anywhere.
pub(crate) fn pin_to_memory(line: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(line) {
        Ok(mut v) if v.get("data").is_some_and(Value::is_object) => {
            v["data"]["credentials"] = json!({"kv_url": "memory://"});
            serde_json::to_vec(&v).expect("a JSON value serialises")
        }
        _ => line.to_vec(),
    }
}

/// Runs the session loop over `input` (read `capacity` bytes at a time, at most `in_flight`
/// sessions at once) and checks its output with [`check_session_output`]. Lines that could run
/// a tool should be [`pin_to_memory`]'d and `app` allow the memory store.
pub(crate) async fn check_session_loop(
    app: Arc<App>,
    input: &[u8],
    capacity: usize,
    in_flight: usize,
) -> Result<(), String> {
    let want = expected_answers(input).await?;
    let mut out = Vec::new();
    let opts =
        ServeOptions { heartbeat: Duration::from_secs(3600), max_in_flight: in_flight, ..ServeOptions::default() };
    serve(tokio::io::BufReader::with_capacity(capacity, input), &mut out, app, opts)
        .await
        .map_err(|e| format!("the session loop failed on a byte slice: {e}"))?;
    check_session_output(&out, &want)
}

/// How many answers each session id must get from the session loop: one per input line that
/// identifies it (a `backwards_response` is never answered).
pub(crate) async fn expected_answers(input: &[u8]) -> Result<HashMap<String, usize>, String> {
    let mut lines = LineReader::new(tokio::io::BufReader::with_capacity(8192, input));
    let mut want = HashMap::new();
    while let Some(line) = lines.next_line().await.map_err(|e| format!("reading a byte slice failed: {e}"))? {
        let sid = match line {
            Line::Oversize { prefix, len } => {
                if len <= MAX_INPUT_LINE {
                    return Err(format!("a line of {len} bytes was reported oversize"));
                }
                session_id_from_prefix(prefix)
            }
            Line::Complete(bytes) => match Inbound::parse(bytes) {
                Ok(m) if m.event == "backwards_response" => None,
                Ok(m) => m.session_id,
                Err(e) => e.session_id,
            },
        };
        if let Some(sid) = sid {
            *want.entry(sid).or_insert(0) += 1;
        }
    }
    Ok(want)
}

/// The session loop's output against [`expected_answers`]: every line is JSON and a
/// heartbeat, log or session event; every identified session ends exactly once and no other
/// session is answered; an error names its `error_type` and comes at most once per session.
pub(crate) fn check_session_output(out: &[u8], want: &HashMap<String, usize>) -> Result<(), String> {
    let mut ends: HashMap<String, usize> = HashMap::new();
    let mut errors: HashMap<String, usize> = HashMap::new();
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line)
            .map_err(|e| format!("output line is not JSON ({e}): {}", String::from_utf8_lossy(line)))?;
        let event = v["event"].as_str().unwrap_or("");
        if !["heartbeat", "log", "session"].contains(&event) {
            return Err(format!("unexpected output event: {v}"));
        }
        if event != "session" {
            continue;
        }
        let sid = v["session_id"].as_str().ok_or_else(|| format!("a session line without a session: {v}"))?;
        if !want.contains_key(sid) {
            return Err(format!("an answer for a session no line identified: {v}"));
        }
        match v["data"]["type"].as_str() {
            Some("end") => *ends.entry(sid.to_owned()).or_default() += 1,
            Some("error") if v["data"]["data"]["error_type"].is_string() => {
                *errors.entry(sid.to_owned()).or_default() += 1
            }
            Some("stream") => {}
            _ => return Err(format!("a session message of unknown type or without error_type: {v}")),
        }
    }
    if &ends != want {
        return Err(format!("every identified session must end exactly once: ends {ends:?}, wanted {want:?}"));
    }
    match errors.iter().find(|(sid, &n)| n > want[*sid]) {
        Some((sid, n)) => Err(format!("{sid}: {n} errors for {} sessions", want[sid])),
        None => Ok(()),
    }
}

/// A store that counts its calls and either works (in memory) or fails every call.
pub(crate) struct CountingStore {
    inner: Option<MemoryStore>,
    calls: AtomicUsize,
    clock: StoreClock,
}

impl CountingStore {
    pub(crate) fn working() -> Self {
        Self::new(Some(MemoryStore::new(HostClock::system(), 0)))
    }
    pub(crate) fn down() -> Self {
        Self::new(None)
    }
    fn new(inner: Option<MemoryStore>) -> Self {
        CountingStore { inner, calls: AtomicUsize::new(0), clock: StoreClock::new(HostClock::system()) }
    }
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    fn count(&self) -> Result<&MemoryStore, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.as_ref().ok_or_else(|| StoreError::unreachable("test store", "down"))
    }
}

impl EventStore for CountingStore {
    async fn create(&self, key: &str, write: Write<'_>, timeout: Duration) -> Result<Created, StoreError> {
        self.count()?.create(key, write, timeout).await
    }
    async fn read_at(&self, key: &str, timeout: Duration) -> Result<(Option<Current>, i64), StoreError> {
        self.count()?.read_at(key, timeout).await
    }
    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        write: Write<'_>,
        timeout: Duration,
    ) -> Result<Swapped, StoreError> {
        self.count()?.swap(key, expected, write, timeout).await
    }
    async fn release(&self, key: &str, rollback: Rollback<'_>, timeout: Duration) -> Result<bool, StoreError> {
        self.count()?.release(key, rollback, timeout).await
    }
    async fn probe(&self) -> Result<Probe, StoreError> {
        Ok(Probe::default())
    }
    fn clock(&self) -> &StoreClock {
        self.inner.as_ref().map_or(&self.clock, EventStore::clock)
    }
}

/// A tool's error against a store that is down: `param_invalid` exactly when the store was
/// not touched (validation comes first), `upstream_error` otherwise, always with a message.
pub(crate) fn check_error_against_down_store(err: &ToolError, store_calls: usize) -> Result<(), String> {
    let expected = if store_calls == 0 { ErrorClass::ParamInvalid } else { ErrorClass::UpstreamError };
    if err.class != expected || err.message.is_empty() {
        return Err(format!("{err:?} after {store_calls} store calls: expected {}", expected.as_str()));
    }
    Ok(())
}

/// The key of a valid (namespace, id): one URL-unreserved path segment within the KV
/// container's key rules, starting `evt`, that parses back to exactly that pair (so no two
/// pairs share a key).
pub(crate) fn check_storage_key(ns: Option<&str>, id: &str) -> Result<(), String> {
    let key = storage_key(ns, id);
    let unreserved = key.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b));
    if !is_key_charset_safe(&key) || !unreserved || key == "." || key == ".." || !key.starts_with("evt") {
        return Err(format!("unsafe key {key:?}"));
    }
    if !(4..=1024).contains(&key.len()) {
        return Err(format!("key {key:?} is {} bytes", key.len()));
    }
    match parse_storage_key(&key) {
        Some((n, i)) if n.as_deref() == ns && i == id => Ok(()),
        other => Err(format!("{key:?} parses back to {other:?}, not ({ns:?}, {id:?})")),
    }
}

/// A payload's canonical text is the same whichever writer makes it: the fast pass and the
/// serde writer agree on what is JSON and on every byte they write (fingerprints are stored,
/// so the pass that ran must never show).
pub(crate) fn check_canonical(payload: &str) -> Result<(), String> {
    use event_store::canonical::{canonical_json_by_serde, canonical_json_or_error};
    let text = |r: Result<Vec<u8>, serde_json::Error>| r.map(|t| String::from_utf8_lossy(&t).into_owned());
    let (ours, reference) = (text(canonical_json_or_error(payload)), text(canonical_json_by_serde(payload)));
    match (&ours, &reference) {
        (Ok(a), Ok(b)) if a == b => Ok(()),
        (Err(_), Err(_)) => Ok(()),
        _ => Err(format!("payload {payload:?}: canonical {ours:?}, the serde writer's {reference:?}")),
    }
}
