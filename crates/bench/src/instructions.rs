//! Instructions per `event_ingest` of the plugin process, counted by callgrind on a fixed replay.
//
// Wall-clock and CPU-time figures move by ±30 % on this shared machine; the number of
// instructions a fixed replay executes does not. Two fresh plugin processes run under
// callgrind, one fed SHORT and one LONG new `event_ingest` lines (IN_FLIGHT sessions open);
// the difference of their totals divided by LONG - SHORT is the steady-state cost of one
// call, without start-up, warm-up and shutdown. Callgrind counts user-space instructions
// only (the kernel's share of pipes and sockets is not in it); see
// docs/performance-instructions.md.
//
// The count still moves by about ±0.5 % with where the process's stack starts (the size of
// its environment and of its path): `memcpy` and the allocator take other paths for other
// alignments. So each pair runs at LAYOUTS stack starts (an environment variable padded by
// 8 bytes more each time) and the median is the figure.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use super::plugin::Plugin;
use super::procs::TempDir;
use super::workload::{dispatch_lines, event_ids, ingest_lines_from, invoke_lines};

/// Lines fed to the shorter and the longer replay, and sessions kept in flight.
pub(crate) const SHORT: usize = 400;
pub(crate) const LONG: usize = 1_400;
pub(crate) const IN_FLIGHT: usize = 64;
/// Stack starts each pair is measured at; the figure is their median.
pub(crate) const LAYOUTS: usize = 5;
/// A replay under callgrind runs ~50× slower than natively; this only bounds a hung one.
const REPLAY_CAP: Duration = Duration::from_secs(600);

/// The target: at most a third of main's instructions per workflow-node ingest on Redis, as
/// issue 27 set it (a third of the 126k it recorded; this replay counts 178k on main).
pub(crate) const TARGET_WORKFLOW_REDIS: f64 = 42_000.0;

/// Who calls, as the envelope tells it: the answer's size differs (18 messages vs 2).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Caller {
    Workflow,
    Agent,
}

impl Caller {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Caller::Workflow => "workflow node",
            Caller::Agent => "agent",
        }
    }

    /// (app_id, message_id) of the daemon's request line for this caller.
    fn envelope(self) -> (Option<&'static str>, Option<&'static str>) {
        match self {
            Caller::Workflow => (Some("bench-app"), None),
            Caller::Agent => (Some("bench-app"), Some("bench-message")),
        }
    }
}

/// The trigger's two calls: the claim at the door, and a run taking it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Door {
    Dispatch,
    Invoke,
}

impl Door {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Door::Dispatch => "trigger dispatch",
            Door::Invoke => "trigger invoke",
        }
    }
}

/// One replay pair's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Count {
    pub store: &'static str,
    pub caller: &'static str,
    /// Total instructions (callgrind `Ir`) of the SHORT and the LONG replay's process.
    pub short_ir: u64,
    pub long_ir: u64,
    /// (long_ir - short_ir) / (LONG - SHORT), the median over the LAYOUTS stack starts
    /// (`short_ir` and `long_ir` are that layout's).
    pub per_ingest: f64,
    /// Every layout's figure, lowest first: their spread is the layout noise.
    pub per_layout: Vec<f64>,
}

/// Whether callgrind can run here; the section is skipped (and says so) when it cannot.
pub(crate) fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What a replay pair sends: new `event_ingest` calls from one caller kind, or one of the
/// trigger's two calls.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    Ingest(Caller),
    Door(Door),
}

impl Call {
    pub(crate) const ALL: [Call; 4] = [
        Call::Ingest(Caller::Workflow),
        Call::Ingest(Caller::Agent),
        Call::Door(Door::Dispatch),
        Call::Door(Door::Invoke),
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Call::Ingest(caller) => caller.name(),
            Call::Door(door) => door.name(),
        }
    }
}

/// Both replays of `call` against the store at `url` (process `store_pid`); `run` numbers the
/// sessions. A trigger invoke's deliveries are dispatched first, outside callgrind. The
/// callgrind files stay in `keep` (`{store}-{call}-{lines}.callgrind`), ready for
/// `callgrind_annotate`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn measure(
    exe: &Path,
    tmp: &TempDir,
    keep: &Path,
    store: &'static str,
    url: &str,
    store_pid: u32,
    call: Call,
    run: &mut u32,
) -> anyhow::Result<Count> {
    let expected = match call {
        Call::Ingest(_) => "accepted",
        Call::Door(Door::Dispatch) => "dispatched",
        Call::Door(Door::Invoke) => "invoked",
    };
    let replay = Replay { exe, tmp, keep, store, what: call.name(), store_pid, expected };
    match call {
        Call::Ingest(caller) => {
            let (app, message) = caller.envelope();
            replay.pair(run, |run, ids| ingest_lines_from(run, url, ids, app, message)).await
        }
        Call::Door(Door::Dispatch) => replay.pair(run, |run, ids| dispatch_lines(run, url, ids)).await,
        Call::Door(Door::Invoke) => {
            replay
                .pair_after(run, |run, ids| dispatch_lines(run, url, ids), |run, ids| invoke_lines(run, url, ids))
                .await
        }
    }
}

/// Fresh plugin processes under callgrind, fed SHORT and LONG request lines of one kind.
struct Replay<'a> {
    exe: &'a Path,
    tmp: &'a TempDir,
    keep: &'a Path,
    store: &'static str,
    what: &'static str,
    store_pid: u32,
    /// The outcome every line must have.
    expected: &'static str,
}

impl Replay<'_> {
    async fn pair(&self, run: &mut u32, lines: impl Fn(u32, &[String]) -> Vec<Vec<u8>>) -> anyhow::Result<Count> {
        self.pair_after(run, |_, _| Vec::new(), lines).await
    }

    /// Like [`Replay::pair`], each replay's ids first sent as `before` lines to a plugin
    /// outside callgrind (to claim what the measured lines need).
    async fn pair_after(
        &self,
        run: &mut u32,
        before: impl Fn(u32, &[String]) -> Vec<Vec<u8>>,
        lines: impl Fn(u32, &[String]) -> Vec<Vec<u8>>,
    ) -> anyhow::Result<Count> {
        let mut layouts = Vec::with_capacity(LAYOUTS);
        for layout in 0..LAYOUTS {
            let totals = self.totals(run, layout, &before, &lines).await?;
            let per_ingest = totals[1].saturating_sub(totals[0]) as f64 / (LONG - SHORT) as f64;
            layouts.push((per_ingest, totals));
        }
        layouts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (per_ingest, [short_ir, long_ir]) = layouts[LAYOUTS / 2];
        let per_layout = layouts.iter().map(|(p, _)| *p).collect();
        Ok(Count { store: self.store, caller: self.what, short_ir, long_ir, per_ingest, per_layout })
    }

    /// The SHORT and the LONG replay's instruction totals at stack start `layout`.
    async fn totals(
        &self,
        run: &mut u32,
        layout: usize,
        before: &impl Fn(u32, &[String]) -> Vec<Vec<u8>>,
        lines: &impl Fn(u32, &[String]) -> Vec<Vec<u8>>,
    ) -> anyhow::Result<[u64; 2]> {
        let mut totals = [0u64; 2];
        let label = self.what.replace(' ', "-");
        let pad = "x".repeat(8 * layout);
        let env = [("STATEFUL_TOOL_BENCH_LAYOUT", pad.as_str())];
        for (total, n) in totals.iter_mut().zip([SHORT, LONG]) {
            *run += 1;
            let tag = format!("ir-{}-{label}-{n}-{run}", self.store);
            let ids = event_ids(&tag, n);
            let first = before(*run, &ids);
            if !first.is_empty() {
                let log = self.tmp.path().join(format!("{tag}-before.log"));
                let mut p = Plugin::spawn(self.exe, &[], &log).await?;
                p.run(*run, &first, IN_FLIGHT, REPLAY_CAP, self.store_pid, "dispatched").await?;
                p.shutdown().await?;
                *run += 1;
            }
            // The first layout's files keep the plain names the docs use.
            let suffix = if layout == 0 { String::new() } else { format!("-layout{layout}") };
            let out = self.keep.join(format!("{}-{label}-{n}{suffix}.callgrind", self.store));
            let wrapper: Vec<String> =
                ["valgrind", "--tool=callgrind", &format!("--callgrind-out-file={}", out.display())]
                    .map(str::to_owned)
                    .to_vec();
            let log = self.tmp.path().join(format!("{tag}.log"));
            let mut p = Plugin::spawn_with(self.exe, &wrapper, &env, &log).await?;
            let m = p.run(*run, &lines(*run, &ids), IN_FLIGHT, REPLAY_CAP, self.store_pid, self.expected).await?;
            anyhow::ensure!(m.ops == n && m.unexpected == 0, "callgrind replay {tag}: {:?}", m.outcomes);
            p.shutdown().await?;
            let text = std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
            *total = total_ir(&text).with_context(|| format!("no instruction total in {}", out.display()))?;
        }
        Ok(totals)
    }
}

/// The `Ir` total of a callgrind output file (its `totals:` line, or `summary:` in older ones).
fn total_ir(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("totals:").or_else(|| l.strip_prefix("summary:")))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// Main's figure for a row: this replay on commit 2bde3f2, before issue 27's changes.
pub(crate) fn main_figure(store: &str, caller: &str) -> Option<f64> {
    match (store, caller) {
        ("kv", "workflow node") => Some(243_369.0),
        ("kv", "agent") => Some(232_227.0),
        ("redis", "workflow node") => Some(178_221.0),
        ("redis", "agent") => Some(168_073.0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_total_of_a_callgrind_file() {
        let text = "version: 1\ncreator: callgrind-3.22.0\nevents: Ir\nfl=(1) a.rs\nfn=(1) f\n3 10\nsummary: 123\n\ntotals: 4567890\n";
        assert_eq!(total_ir(text), Some(123), "the first of summary/totals wins; both carry the total");
        assert_eq!(total_ir("events: Ir\ntotals: 4567890\n"), Some(4_567_890));
        assert_eq!(total_ir("events: Ir\n"), None);
    }
}
