//! Drives the real `stateful-tool serve` binary over pipes, as the daemon does.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");

type Waiters = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Value>>>>;

/// How long a test waits for the plugin before it calls it hung: long enough that only a hang
/// reaches it, whatever the machine's load.
const HANG: std::time::Duration = std::time::Duration::from_secs(120);

/// What one session answered.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reply {
    pub chunks: Vec<Value>,
    pub error: Option<Value>,
}

impl Reply {
    /// The `json` message's object (tools always send one on success).
    pub(crate) fn json(&self) -> &Value {
        self.chunks
            .iter()
            .find(|c| c["type"] == "json")
            .map(|c| &c["message"]["json_object"])
            .unwrap_or_else(|| panic!("no json message in {self:?}"))
    }
    pub(crate) fn outcome(&self) -> String {
        match &self.error {
            Some(e) => format!("error:{}", e["error_type"].as_str().unwrap_or("?")),
            None => self.json()["outcome"].as_str().unwrap_or("?").to_owned(),
        }
    }
    pub(crate) fn error_type(&self) -> Option<&str> {
        self.error.as_ref().and_then(|e| e["error_type"].as_str())
    }
    pub(crate) fn message(&self) -> &str {
        self.error.as_ref().and_then(|e| e["message"].as_str()).unwrap_or("")
    }
    /// The `text` message's sentence ("" when there is none).
    pub(crate) fn text(&self) -> &str {
        self.chunks.iter().find(|c| c["type"] == "text").and_then(|c| c["message"]["text"].as_str()).unwrap_or("")
    }
}

pub(crate) struct Plugin {
    pub child: Child,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    waiters: Waiters,
    pub heartbeats: Arc<AtomicUsize>,
    /// Every `log` event line the plugin wrote (its log while it talks to the daemon).
    pub logs: Arc<Mutex<Vec<String>>>,
    next: AtomicU64,
    tag: String,
}

impl Plugin {
    /// Spawns `serve` with extra environment and waits for its first heartbeat.
    pub(crate) async fn spawn(env: &[(&str, &str)]) -> Plugin {
        Self::spawn_with_stderr(BIN, env, super::child_log::captured("plugin")).await
    }

    /// Like [`Plugin::spawn`], running another build of the binary (e.g. the release one).
    pub(crate) async fn spawn_bin(bin: &str, env: &[(&str, &str)]) -> Plugin {
        Self::spawn_with_stderr(bin, env, super::child_log::captured("plugin")).await
    }

    /// Like [`Plugin::spawn`], with the plugin's stderr (its log) written to `log`.
    pub(crate) async fn spawn_logged(env: &[(&str, &str)], log: &std::path::Path) -> Plugin {
        Self::spawn_with_stderr(BIN, env, std::fs::File::create(log).expect("create the plugin log file").into()).await
    }

    async fn spawn_with_stderr(bin: &str, env: &[(&str, &str)], stderr: Stdio) -> Plugin {
        let mut cmd = tokio::process::Command::new(bin);
        // A healthy store on a loaded test machine can take seconds to answer: tests that are
        // about outcomes get a generous store timeout; tests about timeouts set their own.
        cmd.arg("serve").env("INSTALL_METHOD", "local").env("STATEFUL_TOOL_STORE_TIMEOUT_MS", "30000");
        cmd.envs(env.iter().copied());
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr).kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn stateful-tool serve");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let waiters: Waiters = Arc::default();
        let heartbeats = Arc::new(AtomicUsize::new(0));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        let (w, hb, lg) = (waiters.clone(), heartbeats.clone(), logs.clone());
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut bytes = Vec::new();
            while let Ok(1..) = stdout.read_until(b'\n', &mut bytes).await {
                // A line the end of the stream cut short is a killed process's unfinished write,
                // not output; every finished line must be JSON.
                let Some(finished) = bytes.strip_suffix(b"\n") else { break };
                let line = String::from_utf8_lossy(finished).into_owned();
                bytes.clear();
                let v: Value =
                    serde_json::from_str(&line).unwrap_or_else(|e| panic!("plugin wrote non-JSON {line:?}: {e}"));
                match v["event"].as_str() {
                    Some("heartbeat") => {
                        hb.fetch_add(1, Ordering::SeqCst);
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    Some("session") => {
                        let sid = v["session_id"].as_str().unwrap().to_owned();
                        let tx = w.lock().unwrap().get(&sid).cloned();
                        match tx {
                            Some(tx) => {
                                let _ = tx.send(v["data"].clone());
                            }
                            None => panic!("message for a session nobody opened: {line}"),
                        }
                    }
                    Some("log") => lg.lock().unwrap().push(line),
                    other => panic!("unexpected event {other:?}: {line}"),
                }
            }
        });
        // Hang bounds, not speed checks: a loaded machine may take seconds to start a process.
        tokio::time::timeout(HANG, ready_rx).await.expect("first heartbeat").unwrap();
        let tag = format!("{:08x}", rand::random::<u32>());
        Plugin {
            child,
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            waiters,
            heartbeats,
            logs,
            next: AtomicU64::new(0),
            tag,
        }
    }

    pub(crate) async fn write_raw(&self, bytes: &[u8]) {
        let mut g = self.stdin.lock().await;
        g.as_mut().expect("stdin open").write_all(bytes).await.unwrap();
    }

    pub(crate) async fn close_stdin(&self) {
        self.stdin.lock().await.take();
    }

    /// Registers a session id so its messages are collected (for raw-line tests).
    pub(crate) fn open(&self, sid: &str) -> mpsc::UnboundedReceiver<Value> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.waiters.lock().unwrap().insert(sid.to_owned(), tx);
        rx
    }

    /// Collects one session's messages until its `end`, checking it ends exactly once.
    pub(crate) async fn collect(mut rx: mpsc::UnboundedReceiver<Value>) -> Reply {
        let mut reply = Reply::default();
        loop {
            let msg =
                tokio::time::timeout(HANG, rx.recv()).await.expect("session answered in time").expect("session ended");
            match msg["type"].as_str() {
                Some("stream") => reply.chunks.push(msg["data"].clone()),
                Some("error") => {
                    assert!(reply.error.is_none(), "two errors in one session");
                    reply.error = Some(msg["data"].clone());
                }
                Some("end") => break,
                other => panic!("unexpected session message type {other:?}"),
            }
        }
        reply
    }

    /// Sends one request (`data` as the daemon's request payload) and waits for the answer.
    /// It comes as a workflow tool node's call, whose answers carry the whole record (the
    /// storage key, the full fingerprint) that the store tests look at; an agent's record is
    /// leaner (dify_callers::, dify_face::).
    pub(crate) async fn request(&self, data: Value) -> Reply {
        let sid = format!("{}-{}", self.tag, self.next.fetch_add(1, Ordering::SeqCst));
        let rx = self.open(&sid);
        let line = request_line_as(&sid, &data, Some("app-test"), None);
        self.write_raw(line.as_bytes()).await;
        let reply = Self::collect(rx).await;
        self.waiters.lock().unwrap().remove(&sid);
        reply
    }

    pub(crate) async fn invoke(&self, tool: &str, creds: &Value, params: Value) -> Reply {
        self.request(json!({
            "action": "invoke_tool", "credential_type": "api-key", "credentials": creds, "provider": "stateful_tool",
            "tool": tool, "tool_parameters": params, "type": "tool", "user_id": "test"
        }))
        .await
    }

    pub(crate) async fn validate(&self, creds: &Value) -> Reply {
        self.request(json!({
            "action": "validate_tool_credentials", "credentials": creds, "provider": "stateful_tool", "type": "tool", "user_id": "test"
        }))
        .await
    }
}

/// A request line as the Go daemon serialises it (envelope order, sorted data keys), with
/// no `app_id` and no `message_id` (how a backwards invocation arrives).
pub(crate) fn request_line(sid: &str, data: &Value) -> String {
    request_line_as(sid, data, None, None)
}

/// [`request_line`] with the envelope's `app_id` and `message_id`, which tell Dify's callers
/// apart (workflow tool node: app only; agent app: both).
pub(crate) fn request_line_as(sid: &str, data: &Value, app_id: Option<&str>, message_id: Option<&str>) -> String {
    let sorted: std::collections::BTreeMap<String, Value> =
        data.as_object().cloned().unwrap_or_default().into_iter().collect();
    format!(
        "{{\"session_id\":{},\"conversation_id\":null,\"message_id\":{},\"app_id\":{},\"endpoint_id\":null,\"context\":null,\"event\":\"request\",\"data\":{}}}\n",
        json!(sid),
        json!(message_id),
        json!(app_id),
        serde_json::to_string(&sorted).unwrap()
    )
}

pub(crate) fn creds(url: &str) -> Value {
    json!({ "kv_url": url })
}

/// The environment that runs a process with its wall clock shifted by `offset` (libfaketime's
/// syntax: "+1h", "-1h"), as on a badly set host: LD_PRELOAD of Debian's libfaketime
/// (scripts/ensure-faketime.sh), so the product needs no clock setting for tests. Monotonic
/// time is left alone. Checked once: `date` under it must be off by `offset_s`.
pub(crate) fn skewed_clock(offset: &str, offset_s: i64) -> Vec<(&'static str, String)> {
    let lib = std::fs::read_dir("/usr/lib")
        .expect("/usr/lib")
        .filter_map(|e| Some(e.ok()?.path().join("faketime/libfaketimeMT.so.1")))
        .find(|p| p.exists())
        .expect("libfaketime is missing: scripts/ensure-faketime.sh installs it");
    let env = vec![
        ("LD_PRELOAD", lib.display().to_string()),
        ("FAKETIME", offset.to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ("DONT_FAKE_MONOTONIC", "1".to_owned()),
    ];
    let out = std::process::Command::new("date").arg("+%s").envs(env.iter().map(|(k, v)| (*k, v))).output().unwrap();
    let shown: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("date +%s under libfaketime");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((shown - now - offset_s).abs() < 60, "libfaketime did not shift the clock by {offset}: {shown} vs {now}");
    env
}

impl Plugin {
    /// Like [`Plugin::spawn`] with `env` as owned pairs (see [`skewed_clock`]); asserts the
    /// preloaded library is mapped into the plugin process, so the skew is really its own.
    pub(crate) async fn spawn_with(env: &[(&'static str, String)]) -> Plugin {
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let p = Plugin::spawn(&pairs).await;
        if let Some((_, lib)) = env.iter().find(|(k, _)| *k == "LD_PRELOAD") {
            let pid = p.child.id().expect("the plugin is running");
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            assert!(maps.contains(lib.as_str()), "{lib} is not loaded in the plugin process");
        }
        p
    }
}
