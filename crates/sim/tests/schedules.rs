//! The simulation's budget of seeded schedules, its replay, and the mutants it must catch.

use stateful_tool_sim::{env_u64, search, traced, Flaw, DEFAULT_SCHEDULES, REGRESSIONS};

#[test]
fn every_fault_schedule_keeps_the_invariants() {
    let budget = env_u64("STATEFUL_TOOL_SIM_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
    let started = std::time::Instant::now();
    let searched = search(budget, Flaw::None);
    eprintln!("simulation: {} schedules in {:.1?}; {:?}", searched.ran, started.elapsed(), searched.faults);
    if let Some((seed, why)) = searched.failure {
        panic!(
            "schedule {seed} broke {why}\nreplay it with a trace: STATEFUL_TOOL_SIM_SEED={seed} cargo test -p \
             stateful-tool-sim -- --nocapture"
        );
    }
}

/// Time (a virtual clock), randomness (one seeded generator) and the calls' claim ids (drawn
/// from the seed) are all passed in: one seed replays one run, line for line of its trace.
#[test]
fn a_seed_replays_its_schedule_exactly() {
    for seed in REGRESSIONS.iter().copied().chain([0, 1, 4242]) {
        let (first, trace) = traced(seed, Flaw::None);
        let (again, replay) = traced(seed, Flaw::None);
        assert_eq!((first, trace.len()), (again, replay.len()), "seed {seed}");
        assert!(trace.len() > 3, "seed {seed} traced only {trace:?}");
        if let Some(i) = (0..trace.len()).find(|&i| trace[i] != replay[i]) {
            panic!("seed {seed} diverged at line {i}: {:?} vs {:?}", trace[i], replay[i]);
        }
    }
}

/// The simulation is only worth its budget if it catches a real mistake: when a call cannot
/// recognise its own write (the store hides claim ids: its own late claim looks like someone
/// else's, as before own-write recognition), a schedule fails.
#[test]
fn a_call_blind_to_its_own_writes_is_caught_within_the_budget() {
    let searched = search(DEFAULT_SCHEDULES, Flaw::HidesClaimIds);
    let (seed, why) = searched.failure.expect("a call blind to its own writes survived every schedule");
    eprintln!("a call blind to its own writes fails schedule {seed} (after {} schedules): {why}", searched.ran);
}

/// The old store, which applied a write whenever it arrived (no deadline), is caught too: a
/// request delivered after its caller answered `upstream_error` lands (L3).
#[test]
fn a_store_without_write_deadlines_is_caught_within_the_budget() {
    let searched = search(DEFAULT_SCHEDULES, Flaw::IgnoresDeadlines);
    let (seed, why) = searched.failure.expect("a store ignoring write deadlines survived every schedule");
    assert!(why.starts_with("L3") || why.starts_with("L1") || why.starts_with("L2"), "{why}");
    eprintln!("a store without deadlines fails schedule {seed} (after {} schedules): {why}", searched.ran);
}
