//! One measured run: throughput, latency percentiles, outcomes, and CPU per process from /proc.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::procs::{cpu_ticks, machine_busy_ticks, own_cpu_ticks, TICKS_PER_SEC};

/// The figures of one run, as they appear in the summary.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Measure {
    pub ops: usize,
    pub secs: f64,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// What each operation answered (`accepted`, `duplicate`, `found`, `created`, `error:…`).
    pub outcomes: BTreeMap<String, u64>,
    /// Operations whose outcome was not the one this run expects; any makes the bench fail.
    pub unexpected: u64,
    /// The run hit the per-run time cap before doing all N operations.
    pub capped: bool,
    /// CPU of the measured process (the plugin) per operation; None for raw runs.
    pub subject_cpu_ms_per_op: Option<f64>,
    pub store_cpu_ms_per_op: f64,
    pub loadgen_cpu_ms_per_op: f64,
    /// Cores' worth of CPU used by processes outside this benchmark during the run: noise.
    pub foreign_cpu_cores: f64,
}

/// Outcome tallies; a handful of distinct strings, so a vector beats a map.
#[derive(Debug, Default)]
pub(crate) struct Tally(Vec<(String, u64)>);

impl Tally {
    pub(crate) fn add(&mut self, outcome: &str) {
        match self.0.iter_mut().find(|(k, _)| k == outcome) {
            Some((_, n)) => *n += 1,
            None => self.0.push((outcome.to_owned(), 1)),
        }
    }
    pub(crate) fn merge(&mut self, other: Tally) {
        for (k, n) in other.0 {
            match self.0.iter_mut().find(|(o, _)| *o == k) {
                Some((_, m)) => *m += n,
                None => self.0.push((k, n)),
            }
        }
    }
}

/// CPU counters at the start of a run.
pub(crate) struct Meter {
    subject: Option<u32>,
    store: u32,
    at: Instant,
    subject0: u64,
    store0: u64,
    me0: u64,
    machine0: u64,
}

impl Meter {
    pub(crate) fn start(subject: Option<u32>, store: u32) -> Meter {
        Meter {
            subject,
            store,
            subject0: subject.map_or(0, cpu_ticks),
            store0: cpu_ticks(store),
            me0: own_cpu_ticks(),
            machine0: machine_busy_ticks(),
            at: Instant::now(),
        }
    }

    /// Closes the run. `latencies_us` has one entry per completed operation.
    pub(crate) fn finish(self, mut latencies_us: Vec<u32>, tally: Tally, expected: &str, capped: bool) -> Measure {
        let secs = self.at.elapsed().as_secs_f64();
        let subject = self.subject.map_or(0, cpu_ticks).saturating_sub(self.subject0);
        let store = cpu_ticks(self.store).saturating_sub(self.store0);
        let me = own_cpu_ticks().saturating_sub(self.me0);
        let machine = machine_busy_ticks().saturating_sub(self.machine0);
        let ops = latencies_us.len();
        let per_op = |ticks: u64| ticks as f64 / TICKS_PER_SEC * 1000.0 / ops.max(1) as f64;
        latencies_us.sort_unstable();
        let pct = |q: f64| {
            let i = ((ops as f64 * q).ceil() as usize).clamp(1, ops.max(1)) - 1;
            latencies_us.get(i).map_or(0.0, |&us| us as f64 / 1000.0)
        };
        let outcomes: BTreeMap<String, u64> = tally.0.into_iter().collect();
        let good = outcomes.get(expected).copied().unwrap_or(0);
        Measure {
            ops,
            secs,
            ops_per_s: ops as f64 / secs.max(1e-9),
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            max_ms: latencies_us.last().map_or(0.0, |&us| us as f64 / 1000.0),
            unexpected: ops as u64 - good.min(ops as u64),
            outcomes,
            capped,
            subject_cpu_ms_per_op: self.subject.map(|_| per_op(subject)),
            store_cpu_ms_per_op: per_op(store),
            loadgen_cpu_ms_per_op: per_op(me),
            foreign_cpu_cores: machine.saturating_sub(subject + store + me) as f64 / TICKS_PER_SEC / secs.max(1e-9),
        }
    }
}

/// KiB as the kernel counts them (`/proc/PID/status`) in MB (10^6 bytes), as targets are stated.
pub(crate) fn kib_to_mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

/// Microseconds since `t`, saturating (a latency above 71 minutes is not a latency).
pub(crate) fn micros_since(t: Instant) -> u32 {
    t.elapsed().as_micros().min(u32::MAX as u128) as u32
}
