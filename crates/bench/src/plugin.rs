//! Drives the real `stateful-tool serve` over pipes as the daemon does, many sessions in flight.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::measure::{micros_since, Measure, Meter, Tally};
use super::workload::parse_session_id;

/// Longest silence tolerated from the plugin while sessions are open.
const STALL: Duration = Duration::from_secs(30);

/// A plugin process's memory at the end of its runs, and how fast it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Footprint {
    /// VmHWM.
    pub peak_rss_kib: u64,
    /// RssAnon: what VmHWM holds besides the mapped binary and libraries.
    pub private_rss_kib: u64,
    pub first_heartbeat_ms: f64,
}

pub(crate) struct Plugin {
    child: Child,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    line: Vec<u8>,
    /// From just before `spawn` to the first heartbeat line read.
    pub first_heartbeat: Duration,
}

impl Plugin {
    /// Spawns `serve` (optionally under `wrapper`, e.g. valgrind) and waits for its first
    /// heartbeat. Its stderr (the plugin log) goes to `log`, as the daemon captures it.
    pub(crate) async fn spawn(exe: &Path, wrapper: &[String], log: &Path) -> anyhow::Result<Plugin> {
        Plugin::spawn_with(exe, wrapper, &[], log).await
    }

    /// [`Plugin::spawn`] with `env` added to the plugin's environment.
    pub(crate) async fn spawn_with(
        exe: &Path,
        wrapper: &[String],
        env: &[(&str, &str)],
        log: &Path,
    ) -> anyhow::Result<Plugin> {
        let mut cmd = match wrapper.split_first() {
            None => Command::new(exe),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(exe);
                c
            }
        };
        cmd.arg("serve").env("INSTALL_METHOD", "local").envs(env.iter().copied());
        if !wrapper.is_empty() {
            // Under callgrind the plugin runs ~50× slower: the door's 1.5 s would turn claims
            // into 503s that the replay counts as failures, not as work.
            cmd.env("STATEFUL_TOOL_TRIGGER_TIMEOUT_MS", "60000");
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(std::fs::File::create(log)?).kill_on_drop(true);
        let t0 = Instant::now();
        let mut child = cmd.spawn().with_context(|| format!("spawning {} serve", exe.display()))?;
        let pid = child.id().context("plugin exited at once")?;
        let stdin = child.stdin.take();
        let out = BufReader::with_capacity(64 * 1024, child.stdout.take().context("no stdout pipe")?);
        let mut p = Plugin { child, pid, stdin, out, line: Vec::with_capacity(4096), first_heartbeat: Duration::ZERO };
        let limit = if wrapper.is_empty() { Duration::from_secs(10) } else { Duration::from_secs(120) };
        loop {
            if !p.read_line(limit).await? {
                bail!("the plugin exited before its first heartbeat (see {})", log.display());
            }
            if p.line.starts_with(b"{\"event\":\"heartbeat\"") {
                p.first_heartbeat = t0.elapsed();
                return Ok(p);
            }
        }
    }

    /// Reads one line into `self.line`; false at end of output.
    async fn read_line(&mut self, limit: Duration) -> anyhow::Result<bool> {
        self.line.clear();
        let n = tokio::time::timeout(limit, self.out.read_until(b'\n', &mut self.line))
            .await
            .context("the plugin stopped answering")??;
        Ok(n > 0)
    }

    /// Sends `lines` (request `i` carries session id `session_id(run, i)`) keeping `c`
    /// sessions in flight: each `end` read releases the next request. Latency runs from just
    /// before a request line is written to the read of its session's `end` line.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run(
        &mut self,
        run: u32,
        lines: &[Vec<u8>],
        c: usize,
        cap: Duration,
        store_pid: u32,
        expected: &str,
    ) -> anyhow::Result<Measure> {
        let n = lines.len();
        let mut sent = vec![None::<Instant>; n];
        let mut latencies = Vec::with_capacity(n);
        let mut tally = Tally::default();
        let meter = Meter::start(Some(self.pid), store_pid);
        let deadline = Instant::now() + cap;
        let (mut next, mut open) = (0usize, 0usize);
        // At most `c` (≤ 64) small lines are ever unread in the pipe, and the plugin reads
        // stdin independently of its output, so writing inline here cannot deadlock.
        while next < n.min(c) {
            self.send(&mut sent, lines, next).await?;
            next += 1;
            open += 1;
        }
        while open > 0 {
            if !self.read_line(STALL).await? {
                bail!("the plugin closed its output with {open} sessions open");
            }
            let Some((sid, kind, rest)) = session_line(&self.line) else { continue };
            let Some((_, i)) = parse_session_id(sid).filter(|&(r, i)| r == run && i < n) else {
                bail!("a session line for a session this run did not open: {}", String::from_utf8_lossy(&self.line));
            };
            match kind {
                b"stream" => {
                    if let Some(outcome) = json_outcome(rest) {
                        tally.add(outcome);
                    }
                }
                b"error" => tally.add(&format!("error:{}", error_type(rest).unwrap_or("?"))),
                b"end" => {
                    let t = sent[i].take().context("two ends for one session")?;
                    latencies.push(micros_since(t));
                    open -= 1;
                    if next < n && Instant::now() < deadline {
                        self.send(&mut sent, lines, next).await?;
                        next += 1;
                        open += 1;
                    }
                }
                other => bail!("unexpected session message type {:?}", String::from_utf8_lossy(other)),
            }
        }
        Ok(meter.finish(latencies, tally, expected, next < n))
    }

    /// Writes all `lines` at once and reads until every session has ended; latency runs from
    /// the start of the burst. The lines are written from their own task: the plugin stops
    /// reading stdin while its answers wait to be read, so writing inline could deadlock.
    pub(crate) async fn burst(
        &mut self,
        run: u32,
        lines: Vec<Vec<u8>>,
        store_pid: u32,
        expected: &str,
    ) -> anyhow::Result<Measure> {
        let n = lines.len();
        let mut stdin = self.stdin.take().context("stdin already closed")?;
        let meter = Meter::start(Some(self.pid), store_pid);
        let t0 = Instant::now();
        let writer = tokio::spawn(async move { stdin.write_all(&lines.concat()).await.map(|()| stdin) });
        let (mut ended, mut latencies, mut tally) = (vec![false; n], Vec::with_capacity(n), Tally::default());
        while latencies.len() < n {
            if !self.read_line(STALL).await? {
                bail!("the plugin closed its output with {} sessions open", n - latencies.len());
            }
            let Some((sid, kind, rest)) = session_line(&self.line) else { continue };
            let Some((_, i)) = parse_session_id(sid).filter(|&(r, i)| r == run && i < n) else {
                bail!("a session line for a session this run did not open: {}", String::from_utf8_lossy(&self.line));
            };
            match kind {
                b"stream" => json_outcome(rest).into_iter().for_each(|o| tally.add(o)),
                b"error" => tally.add(&format!("error:{}", error_type(rest).unwrap_or("?"))),
                b"end" if !std::mem::replace(&mut ended[i], true) => latencies.push(micros_since(t0)),
                b"end" => bail!("two ends for one session"),
                other => bail!("unexpected session message type {:?}", String::from_utf8_lossy(other)),
            }
        }
        self.stdin = Some(writer.await?.context("writing the burst")?);
        Ok(meter.finish(latencies, tally, expected, false))
    }

    async fn send(&mut self, sent: &mut [Option<Instant>], lines: &[Vec<u8>], i: usize) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        sent[i] = Some(Instant::now());
        stdin.write_all(&lines[i]).await.context("writing a request line")?;
        Ok(())
    }

    /// Peak resident set size so far (VmHWM), in KiB.
    pub(crate) fn peak_rss_kib(&self) -> u64 {
        super::procs::vm_kib(self.pid, "VmHWM")
    }

    /// What the process holds now, for the rows of the runs it served.
    pub(crate) fn footprint(&self) -> Footprint {
        Footprint {
            peak_rss_kib: self.peak_rss_kib(),
            private_rss_kib: super::procs::vm_kib(self.pid, "RssAnon"),
            first_heartbeat_ms: self.first_heartbeat.as_secs_f64() * 1000.0,
        }
    }

    /// Closes stdin (how the daemon ends a plugin gracefully) and waits for the exit.
    pub(crate) async fn shutdown(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let wait = async {
            while self.read_line(STALL).await? {}
            self.child.wait().await.context("waiting for the plugin")
        };
        let status = tokio::time::timeout(Duration::from_secs(20), wait).await.context("plugin did not exit")??;
        if !status.success() {
            bail!("the plugin exited with {status}");
        }
        Ok(())
    }
}

const SESSION: &[u8] = b"{\"event\":\"session\",\"session_id\":\"";
const DATA_TYPE: &[u8] = b"\",\"data\":{\"type\":\"";

/// (session id, message type, the rest) of a `session` line, by its fixed layout; other
/// events (heartbeat, log) give None.
fn session_line(line: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let rest = line.strip_prefix(SESSION)?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let (sid, rest) = rest.split_at(end);
    let rest = rest.strip_prefix(DATA_TYPE)?;
    let end = rest.iter().position(|&b| b == b'"')?;
    Some((sid, &rest[..end], &rest[end + 1..]))
}

/// The `outcome` of a `json` chunk; other chunks (text, variables) give None.
fn json_outcome(rest: &[u8]) -> Option<&str> {
    const JSON: &[u8] = b",\"data\":{\"type\":\"json\",\"message\":{\"json_object\":{\"outcome\":\"";
    match rest.strip_prefix(JSON) {
        Some(json) => string_at(json),
        None => trigger_outcome(rest),
    }
}

/// A trigger chunk's outcome: `dispatched` (dispatch named the event: a run starts),
/// `turned_away` (it named none), `invoked` or `cancelled` (invoke's answer).
fn trigger_outcome(rest: &[u8]) -> Option<&'static str> {
    let has = |needle: &[u8]| rest.windows(needle.len()).any(|w| w == needle);
    if has(b"\"events\":[\"webhook_received\"]") {
        Some("dispatched")
    } else if has(b"\"events\":[]") {
        Some("turned_away")
    } else if has(b"\"cancelled\":false") {
        Some("invoked")
    } else if has(b"\"cancelled\":true") {
        Some("cancelled")
    } else {
        None
    }
}

fn error_type(rest: &[u8]) -> Option<&str> {
    string_at(rest.strip_prefix(b",\"data\":{\"error_type\":\"".as_slice())?)
}

fn string_at(s: &[u8]) -> Option<&str> {
    std::str::from_utf8(&s[..s.iter().position(|&b| b == b'"')?]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dify_plugin::protocol::outbound::session_line as make;
    use serde_json::json;

    #[test]
    fn reads_the_plugins_own_session_lines() {
        let answer = stateful_tool::Answer::new("accepted").field("accepted", json!(true));
        let lines = dify_plugin::protocol::outbound::answer_end_lines("s1", &answer, false);
        let parsed: Vec<_> = lines.split_inclusive(|&b| b == b'\n').map(|l| session_line(l).unwrap()).collect();
        let kinds: Vec<&[u8]> = parsed.iter().map(|(_, kind, _)| *kind).collect();
        assert_eq!(kinds, [&b"stream"[..], b"stream", b"end"]);
        assert!(parsed.iter().all(|(sid, _, _)| *sid == b"s1"));
        assert_eq!(json_outcome(parsed[0].2), None, "the text message is a sentence, not the answer");
        assert_eq!(json_outcome(parsed[1].2), Some("accepted"));
        let err = make("s1", "error", &json!({"error_type": "conflict", "message": "m", "args": {}}));
        let (_, kind, rest) = session_line(&err).unwrap();
        assert_eq!((kind, error_type(rest)), (&b"error"[..], Some("conflict")));
        assert_eq!(session_line(b"{\"event\":\"heartbeat\",\"session_id\":null,\"data\":{}}"), None);
    }

    #[test]
    fn reads_the_triggers_chunks() {
        let outcome = |chunk: serde_json::Value| {
            let line = make("s1", "stream", &chunk);
            let (_, _, rest) = session_line(&line).unwrap();
            json_outcome(rest).map(str::to_owned)
        };
        let dispatch =
            |events: serde_json::Value| json!({"user_id": "", "events": events, "response": "00", "payload": {}});
        assert_eq!(outcome(dispatch(json!(["webhook_received"]))).as_deref(), Some("dispatched"));
        assert_eq!(outcome(dispatch(json!([]))).as_deref(), Some("turned_away"));
        assert_eq!(outcome(json!({"variables": {"a": 1}, "cancelled": false})).as_deref(), Some("invoked"));
        assert_eq!(outcome(json!({"variables": {}, "cancelled": true})).as_deref(), Some("cancelled"));
    }
}
