//! The integrity check of a serving store: every page (redb's checksums, see `verify`) and
//! every record (its own checksum), in a thread of its own, once after start and on demand
//! (`POST /admin/check`). Its state is reported by `/healthz` (`integrity`), the log and
//! `/metrics` (`kv_integrity_*`); damage it finds stops reads and writes like damage a
//! request finds.
//!
//! Why not before serving, as the store once did: the check reads the whole file (minutes
//! at ten million records), and a start that waits for it takes the store away for as long.
//! Power loss needs no check: redb's own recovery of an unclean file stays on the start
//! path, and a commit is checksummed; the check is for damage done to the file since.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::check_process::{self, lower_priority, CheckProgram};
use super::health::Health;
use super::open::{CleanStart, Damaged, DbSlot};
use super::pin::{pin, First, Pinned};
use super::record::system_now_ms;
use super::traffic::Traffic;
use super::verify::{self, Failed};

/// What the last check found; `/healthz` shows it as `integrity`.
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// No check since start.
    NotRun,
    Running {
        started_ms: u64,
    },
    Passed {
        started_ms: u64,
        finished_ms: u64,
        records: u64,
    },
    Damaged {
        started_ms: u64,
        finished_ms: u64,
        reason: String,
    },
    /// Stopped (shutdown, the store reopened after failed writes) or the file unreadable.
    Incomplete {
        started_ms: u64,
        finished_ms: u64,
        reason: String,
    },
}

/// `kv_integrity_*`: whether a check runs, when one last passed, whether one found damage.
#[derive(Clone)]
pub(crate) struct IntegrityMetrics {
    running: Gauge,
    passed: Gauge,
    damaged: Gauge,
}

impl IntegrityMetrics {
    pub(crate) fn register(registry: &mut Registry) -> IntegrityMetrics {
        let m = IntegrityMetrics { running: Gauge::default(), passed: Gauge::default(), damaged: Gauge::default() };
        registry.register(
            "integrity_check_running",
            "1 while the check of every page and record runs",
            m.running.clone(),
        );
        registry.register_with_unit(
            "integrity_check_passed",
            "Unix time the last complete check of every page and record passed; 0 = none since start",
            Unit::Seconds,
            m.passed.clone(),
        );
        registry.register("integrity_damage_found", "1 once a check found damage in the data file", m.damaged.clone());
        m
    }
}

/// Where the check reads.
#[derive(Default)]
pub(crate) enum CheckRunner {
    /// In a thread of the server: a container served in-process ([`crate::Container`]).
    #[default]
    Thread,
    /// In a process of its own (`kv serve`; why: see `check_process`).
    Process(CheckProgram),
}

/// The check's state and its thread; one check at a time.
#[derive(Default)]
pub(crate) struct Integrity {
    runner: CheckRunner,
    /// The data file as found at start, when closed cleanly, until the first check takes it.
    clean_start: Mutex<Option<CleanStart>>,
    verdict: Mutex<Option<Verdict>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What a check needs of the engine (not the engine itself: its queue would keep the
/// writer alive at shutdown).
pub(crate) struct CheckJob {
    pub(crate) slot: Arc<DbSlot>,
    pub(crate) health: Arc<Health>,
    pub(crate) metrics: IntegrityMetrics,
    /// Requests served, for the check's pace.
    pub(crate) traffic: Arc<Traffic>,
}

/// The snapshot a check reads, taken when it is asked for, on the caller's thread and
/// between two commits (so the first check's is taken before the first write): the commit
/// held to the end (see `pin`), and the reopen count then. The first check of a file closed
/// cleanly uses the header the file had before it was opened, while the file is still the
/// one found (`CleanStart::describes`: on a loaded machine requests can commit first): it
/// then also compares the free-page state stored at the clean close with the pages in use,
/// as the check of a stopped file does. Every check sees the file at the length it had then
/// (`verify::Commit`): commits made before its process opens the file grow it or trim it.
struct Snapshot {
    pinned: Pinned,
    generation: u64,
}

impl Integrity {
    pub(crate) fn new(clean_start: Option<CleanStart>, runner: CheckRunner) -> Integrity {
        Integrity { runner, clean_start: Mutex::new(clean_start), ..Integrity::default() }
    }

    pub(crate) fn verdict(&self) -> Verdict {
        self.verdict.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or(Verdict::NotRun)
    }

    fn set(&self, v: Verdict) {
        *self.verdict.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
    }

    /// Starts a check unless one runs (then `false`).
    pub(crate) fn start(self: &Arc<Self>, job: CheckJob) -> bool {
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(self.verdict(), Verdict::Running { .. }) || self.stop.load(Ordering::SeqCst) {
            return false;
        }
        if let Some(done) = thread.take() {
            let _ = done.join();
        }
        let started_ms = system_now_ms();
        let generation = job.slot.generation();
        let taken = job.slot.get().ok_or_else(|| "the store is being reopened".to_owned()).and_then(|db| {
            let _between = job.slot.commit_gate();
            let mut pinned = pin(db, job.slot.path(), First::AsIs)?;
            let at_start = self.clean_start.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(start) = at_start.filter(|s| s.describes(&pinned.header, pinned.len)) {
                pinned.header = start.header;
            }
            Ok(Snapshot { pinned, generation })
        });
        let snapshot = match taken {
            Ok(s) => s,
            Err(why) => {
                self.set(Verdict::Incomplete { started_ms, finished_ms: started_ms, reason: why });
                return true;
            }
        };
        self.set(Verdict::Running { started_ms });
        job.metrics.running.set(1);
        let me = self.clone();
        let spawned =
            std::thread::Builder::new().name("kv-check".into()).spawn(move || me.run(job, snapshot, started_ms));
        match spawned {
            Ok(handle) => *thread = Some(handle),
            Err(e) => self.set(Verdict::Incomplete {
                started_ms,
                finished_ms: system_now_ms(),
                reason: format!("cannot start the check: {e}"),
            }),
        }
        true
    }

    /// Ends a running check and waits for it (shutdown: it holds the database open).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }

    fn run(&self, job: CheckJob, snapshot: Snapshot, started_ms: u64) {
        if matches!(self.runner, CheckRunner::Thread) {
            lower_priority();
        }
        let started = Instant::now();
        tracing::info!("kv: integrity check of every page and record started");
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.check(&job.slot, &job.traffic, snapshot)))
                .unwrap_or_else(|_| {
                    Err(Failed::Damaged("the storage engine failed reading a record (an internal assertion)".into()))
                });
        let finished_ms = system_now_ms();
        job.metrics.running.set(0);
        let verdict = match result {
            Ok(records) => {
                tracing::info!(
                    "kv: integrity check passed: {records} records, every page intact ({:.1} s)",
                    started.elapsed().as_secs_f64()
                );
                job.metrics.passed.set(i64::try_from(finished_ms / 1000).unwrap_or(i64::MAX));
                Verdict::Passed { started_ms, finished_ms, records }
            }
            Err(Failed::Damaged(why)) => {
                let path = job.slot.path();
                let dir = path.parent().unwrap_or(path).display().to_string();
                tracing::error!(
                    "kv: integrity check: {}",
                    Damaged { path: path.display().to_string(), dir, why: why.clone() }
                );
                job.metrics.damaged.set(1);
                job.health.damaged(&format!("the integrity check found: {why}"));
                Verdict::Damaged { started_ms, finished_ms, reason: why }
            }
            Err(Failed::Incomplete(why)) => {
                tracing::warn!("kv: integrity check did not complete: {why}");
                Verdict::Incomplete { started_ms, finished_ms, reason: why }
            }
        };
        self.set(verdict);
    }

    /// Pages first (redb's checksums), then every record of the same snapshot.
    fn check(&self, slot: &DbSlot, traffic: &Traffic, snap: Snapshot) -> Result<u64, Failed> {
        let (stop, counter, generation) = (self.stop.clone(), slot.generation_counter(), snap.generation);
        let ended: verify::StopWhen =
            Arc::new(move || stop.load(Ordering::SeqCst) || counter.load(Ordering::SeqCst) != generation);
        let records = match &self.runner {
            CheckRunner::Process(program) => {
                let pinned = &snap.pinned;
                check_process::check(program, slot.path(), pinned.commit(), &pinned.ladder, traffic, &ended)
            }
            CheckRunner::Thread => in_thread(slot.path(), &snap.pinned, &ended),
        };
        snap.pinned.let_go().descend(&*ended);
        records
    }
}

/// The check in this thread, asking `ended` before every page read.
fn in_thread(path: &Path, pinned: &Pinned, ended: &verify::StopWhen) -> Result<u64, Failed> {
    // Asked before every page read: also when the ladder takes its rungs.
    let (ladder, asked) = (pinned.ladder.clone(), ended.clone());
    let stop_when: verify::StopWhen = Arc::new(move || {
        ladder.keep_up();
        asked()
    });
    // The records are read through the checking database: the serving one's cache keeps
    // the pages requests use. Its pages stay this commit's while `pinned` lives. No pace:
    // this runner is an in-process container's (`kv serve` checks in a process, paced).
    let reads = verify::Reads::Asked(None);
    let checked = verify::verify_pages(path, stop_when.clone(), verify::View::Running(pinned.commit()), reads)?;
    verify::read_records(checked.db(), &stop_when)
}
