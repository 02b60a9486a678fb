//! A fake daemon remote-debugging port: accepts the plugin, checks its registration against vector 12, plays requests.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpListener;

use super::plugin::{request_line, Reply};

pub(crate) const VECTOR_12: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/spec/examples/12-remote-tcp-registration.plugin-to-daemon.jsonl"
);
/// Bound on every single wait, so a broken plugin fails the test instead of hanging it.
pub(crate) const STEP: Duration = Duration::from_secs(20);

pub(crate) struct FakeDaemon {
    listener: TcpListener,
}

impl FakeDaemon {
    pub(crate) async fn bind() -> FakeDaemon {
        FakeDaemon { listener: TcpListener::bind("127.0.0.1:0").await.unwrap() }
    }

    pub(crate) fn port(&self) -> u16 {
        self.listener.local_addr().unwrap().port()
    }

    pub(crate) async fn accept(&self) -> Conn {
        self.accept_within(STEP).await.expect("the plugin connected in time")
    }

    pub(crate) async fn accept_within(&self, wait: Duration) -> Option<Conn> {
        let (stream, _) = tokio::time::timeout(wait, self.listener.accept()).await.ok()?.unwrap();
        let (read, write) = stream.into_split();
        Some(Conn { lines: BufReader::new(read).lines(), write })
    }
}

pub(crate) struct Conn {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
}

impl Conn {
    /// The next non-empty line the plugin wrote, parsed; `None` when it closed the connection.
    pub(crate) async fn line(&mut self) -> Option<Value> {
        let line = self.raw_line().await?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("plugin wrote non-JSON {line:?}: {e}")))
    }

    /// The next non-empty line the plugin wrote, as written.
    pub(crate) async fn raw_line(&mut self) -> Option<String> {
        loop {
            let line =
                tokio::time::timeout(STEP, self.lines.next_line()).await.expect("plugin line in time").ok()??;
            if !line.trim().is_empty() {
                return Some(line);
            }
        }
    }

    /// Every line through `end`, checked against vector 12 for the given key.
    pub(crate) async fn registration(&mut self, key: &str) -> Vec<Value> {
        let mut lines = vec![];
        loop {
            let line = self.line().await.expect("connection open during registration");
            assert!(line.get("event").is_none(), "only registration lines before `end`, got {line}");
            let end = line["type"] == "end";
            lines.push(line);
            if end {
                break;
            }
        }
        check_registration(&lines, key);
        lines
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.unwrap();
    }

    /// Sends one request and collects its session until `end`; heartbeats and logs are skipped.
    pub(crate) async fn request(&mut self, sid: &str, data: &Value) -> Reply {
        self.send(request_line(sid, data).as_bytes()).await;
        let mut reply = Reply::default();
        loop {
            let line = self.line().await.expect("connection open until the session ended");
            if line["event"] != "session" || line["session_id"] != sid {
                continue;
            }
            let msg = &line["data"];
            match msg["type"].as_str() {
                Some("stream") => reply.chunks.push(msg["data"].clone()),
                Some("error") => reply.error = Some(msg["data"].clone()),
                Some("end") => return reply,
                other => panic!("unexpected session message type {other:?}"),
            }
        }
    }

    /// Answers like the daemon does on a failure: one text line, then close.
    pub(crate) async fn refuse(mut self, text: &str) {
        self.write.write_all(text.as_bytes()).await.unwrap();
        self.write.shutdown().await.unwrap();
        // Read what the plugin still sends, so closing does not reset the connection.
        let mut rest = self.lines.into_inner();
        let _ = tokio::time::timeout(STEP, async { while rest.read(&mut [0u8; 4096]).await.unwrap_or(0) > 0 {} }).await;
    }
}

fn vector_12() -> Vec<Value> {
    let text = std::fs::read_to_string(VECTOR_12).unwrap_or_else(|e| panic!("cannot read {VECTOR_12}: {e}"));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Runs of equal types collapsed: `asset_chunk` appears once per run.
fn type_runs(lines: &[Value]) -> Vec<String> {
    let mut runs: Vec<String> = lines.iter().filter_map(|l| l["type"].as_str()).map(str::to_owned).collect();
    runs.dedup();
    runs
}

/// Checks our registration line by line against the SDK's (vector 12): type sequence, key sets
/// at every level both have (values are ours), the key echoed, asset chunks decoding to our icons.
pub(crate) fn check_registration(ours: &[Value], key: &str) {
    // The vector ends with the SDK's first heartbeat, which is not part of the registration.
    let theirs: Vec<Value> = vector_12().into_iter().filter(|l| l.get("type").is_some()).collect();
    assert_eq!(type_runs(ours), type_runs(&theirs), "registration type sequence");
    let of = |lines: &[Value], t: &str| lines.iter().find(|l| l["type"] == t).cloned().unwrap();
    let keys = |v: &Value| v.as_object().map(|m| m.keys().cloned().collect::<BTreeSet<_>>());
    for l in ours {
        assert_eq!(keys(l), keys(&of(&theirs, l["type"].as_str().unwrap())), "line keys of {l}");
    }
    let chunk = |lines: &[Value]| keys(&of(lines, "asset_chunk")["data"]);
    assert_eq!(chunk(ours), chunk(&theirs), "asset_chunk data keys");
    assert_eq!(of(ours, "handshake")["data"], serde_json::json!({ "key": key }), "handshake key");
    let manifest = of(ours, "manifest_declaration")["data"].clone();
    assert_eq!(&manifest, stateful_tool::manifest());
    same_keys(&manifest, &of(&theirs, "manifest_declaration")["data"], "manifest");
    let tools = of(ours, "tool_declaration")["data"].clone();
    assert_eq!(tools.as_array().map(Vec::len), Some(1), "tool_declaration data is a one-element array");
    assert_eq!(&tools[0], stateful_tool::tool_provider());
    same_keys(&tools[0], &of(&theirs, "tool_declaration")["data"][0], "provider");
    assert_eq!(of(ours, "end")["data"], serde_json::json!({}));

    let mut files: BTreeMap<String, (Vec<u8>, bool)> = BTreeMap::new();
    for chunk in ours.iter().filter(|l| l["type"] == "asset_chunk") {
        let d = &chunk["data"];
        let raw = base64::engine::general_purpose::STANDARD.decode(d["data"].as_str().unwrap()).unwrap();
        assert!(!raw.is_empty() && raw.len() <= 8192, "chunk of {} bytes", raw.len());
        let file = files.entry(d["filename"].as_str().unwrap().to_owned()).or_default();
        assert!(!file.1, "chunk after the last one of {}", d["filename"]);
        file.0.extend(raw);
        file.1 = d["end"].as_bool().unwrap();
    }
    let expected: BTreeMap<String, (Vec<u8>, bool)> =
        stateful_tool::assets().iter().map(|(n, b)| (n.to_string(), (b.to_vec(), true))).collect();
    assert_eq!(files, expected, "asset chunks decode to our icons, each file ended");
    for icon in [&manifest["icon"], &manifest["icon_dark"], &tools[0]["identity"]["icon"]] {
        if let Some(name) = icon.as_str() {
            assert!(files.contains_key(name), "referenced icon {name} was sent");
        }
    }
}

/// Deliberate differences from the SDK's shapes (see `src/declarations`): the manifest also
/// carries `tags` and `privacy` (fields of the daemon's struct); `extra.python` is SDK-only.
const EXTRA_OK: [(&str, &str); 2] = [("manifest", "tags"), ("manifest", "privacy")];
const MISSING_OK: [(&str, &str); 2] = [("provider", "extra"), ("provider.tools[]", "extra")];

/// Same key sets wherever both sides have an object; array items are compared with the SDK's first item.
fn same_keys(ours: &Value, theirs: &Value, path: &str) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let ka: BTreeSet<&str> = a.keys().map(String::as_str).collect();
            let kb: BTreeSet<&str> = b.keys().map(String::as_str).collect();
            let extra: Vec<_> = ka.difference(&kb).filter(|k| !EXTRA_OK.contains(&(path, **k))).collect();
            let missing: Vec<_> = kb.difference(&ka).filter(|k| !MISSING_OK.contains(&(path, **k))).collect();
            assert!(extra.is_empty() && missing.is_empty(), "{path}: extra keys {extra:?}, missing keys {missing:?}");
            for (k, v) in a {
                if let Some(t) = b.get(k) {
                    same_keys(v, t, &format!("{path}.{k}"));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if let Some(first) = b.first() {
                a.iter().for_each(|item| same_keys(item, first, &format!("{path}[]")));
            }
        }
        _ => {}
    }
}
