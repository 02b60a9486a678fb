//! Deterministic simulation of the claim protocol under seeded fault schedules.
//!
//! Each schedule runs several concurrent deliveries of one event, the runs they start
//! (completing, failing or crashing), and stray completions, against a simulated store whose
//! every request is delivered, delayed past its caller's timeout, applied with its answer
//! lost, refused, cut before delivery, duplicated or reordered, while the store's clock moves,
//! TTLs run out and the store restarts (losing only what no answer revealed). One thread, a
//! virtual clock and a seeded generator: a seed replays its schedule exactly.
//!
//! The simulator stays outside the code it checks (TigerBeetle's VOPR beside its replica):
//! the plugin's tools run unchanged through `stateful_tool::Tool::invoke`, and everything a
//! schedule varies is passed in: the store (with its clock, `store`), the claim ids
//! (`Settings::with_claim_ids`) and the call's deadline (`Settings::with_call_timeout`).
//!
//! Layout: `schedule` (one seeded run and its main loop) steps `calls` (the tool calls it
//! makes) and `network` (how each store request is delivered, or not), all three over `state`
//! (one schedule's state), `store` (what the tools see) and `world` (the store's state);
//! `check` holds the invariants, `report` the fault counts and the trace's words, `rng` the
//! seeded generator. The tests are in `tests/schedules.rs`.
//!
//! `STATEFUL_TOOL_SIM_SEED=<n>` replays one schedule with its trace (time, randomness and the
//! calls' claim ids all come from the seed); `STATEFUL_TOOL_SIM_SCHEDULES=<n>` runs more
//! schedules than the default budget.

mod calls;
mod check;
mod network;
mod report;
mod rng;
mod schedule;
mod state;
mod store;
mod world;

pub use report::Faults;
pub use world::Flaw;

/// Schedules per `cargo test` run.
pub const DEFAULT_SCHEDULES: u64 = 10_000;

/// Seeds that once broke an invariant during development; they run first, every time.
/// 767: a create delayed past the record's expiry landed as an orphan (now: network delay is
/// bounded by the racing record's lifetime, which the lease margin makes ≥ lease + 60 s).
/// 7477: a duplicated create landed after a roll-back had deleted the key (now: a roll-back
/// marks the claim failed instead of deleting it).
pub const REGRESSIONS: &[u64] = &[767, 7477];

/// What a search ran and the first schedule that failed.
#[derive(Debug)]
pub struct Search {
    /// The first failing seed and the invariant it broke (its name first: `S1`, `L3`, …).
    pub failure: Option<(u64, String)>,
    /// The faults injected and the answers given, over every schedule run.
    pub faults: Faults,
    /// How many schedules ran.
    pub ran: u64,
}

/// The number in environment variable `name`, if it holds one.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs the regression seeds, then seeds `0..budget`, stopping at the first failure; with
/// `STATEFUL_TOOL_SIM_SEED` set, only that seed, with its trace on stderr. `flaw` plays a
/// broken store (a mutant the invariants must catch); `Flaw::None` is a sound one.
pub fn search(budget: u64, flaw: Flaw) -> Search {
    let mut faults = Faults::default();
    if let Some(seed) = env_u64("STATEFUL_TOOL_SIM_SEED") {
        let failure = schedule::run(seed, true, &mut faults, flaw).err().map(|e| (seed, e));
        return Search { failure, faults, ran: 1 };
    }
    let mut ran = 0;
    for seed in REGRESSIONS.iter().copied().chain(0..budget) {
        ran += 1;
        if let Err(e) = schedule::run(seed, false, &mut faults, flaw) {
            return Search { failure: Some((seed, e)), faults, ran };
        }
    }
    Search { failure: None, faults, ran }
}

/// Schedule `seed`'s outcome (`Err` names the invariant it broke) and its whole trace, line
/// by line: one seed, one run.
pub fn traced(seed: u64, flaw: Flaw) -> (Result<(), String>, Vec<String>) {
    schedule::traced(seed, flaw)
}
