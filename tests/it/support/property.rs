//! How every property test runs: a fixed seed, kept regressions, an opt-in random budget.
//!
//! `make test` and CI run each property from a seed derived from its name, so two runs of one
//! commit draw the same cases. A failing case proptest finds is appended to the test file's
//! list under `tests/it/proptest-regressions/` and replayed first on every later run: commit
//! it with the fix. To look for new failures, `STATEFUL_TOOL_PROPTEST_RANDOM=<cases>` adds that
//! many cases from a fresh seed (printed before they run), and `STATEFUL_TOOL_PROPTEST_SEED=<64
//! hex digits>` replaces the fixed seed, e.g. to replay a printed one.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, FileFailurePersistence, RngAlgorithm, TestCaseResult, TestRng, TestRunner};

const SEED_VAR: &str = "STATEFUL_TOOL_PROPTEST_SEED";
const RANDOM_VAR: &str = "STATEFUL_TOOL_PROPTEST_RANDOM";

/// Runs `test` on `cases` values of `strategy` from the fixed (or `STATEFUL_TOOL_PROPTEST_SEED`)
/// seed, then on the opt-in random budget. `regressions` is the file failing cases are kept
/// in, relative to the package root (where `cargo test` runs integration tests).
pub(crate) fn check<S: Strategy>(
    regressions: &'static str,
    name: &str,
    cases: u32,
    strategy: &S,
    test: impl Fn(S::Value) -> TestCaseResult,
) {
    let seed = match std::env::var(SEED_VAR) {
        Ok(hex) => hex::decode(hex.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .unwrap_or_else(|| panic!("{SEED_VAR} must be 64 hex digits, got {hex:?}")),
        Err(_) => fixed_seed(name),
    };
    run(regressions, name, cases, seed, strategy, &test);
    let random = std::env::var(RANDOM_VAR).ok().map(|n| {
        n.trim().parse::<u32>().unwrap_or_else(|_| panic!("{RANDOM_VAR} must be a number of cases, got {n:?}"))
    });
    if let Some(extra) = random.filter(|&n| n > 0) {
        let seed: [u8; 32] = rand::random();
        eprintln!("{name}: {extra} random cases from seed {}", hex::encode(seed));
        run(regressions, name, extra, seed, strategy, &test);
    }
}

fn run<S: Strategy>(
    regressions: &'static str,
    name: &str,
    cases: u32,
    seed: [u8; 32],
    strategy: &S,
    test: &impl Fn(S::Value) -> TestCaseResult,
) {
    if let Some(dir) = std::path::Path::new(regressions).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let config = Config {
        cases,
        rng_algorithm: RngAlgorithm::ChaCha,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    if let Err(e) = runner.run(strategy, test) {
        let seed = hex::encode(seed);
        panic!("{name}: {e}\nrun seed {seed}; replay: {SEED_VAR}={seed} cargo test --test it {name}");
    }
}

/// A seed that depends only on the test's name (FNV-1a over the name and the byte index).
fn fixed_seed(name: &str) -> [u8; 32] {
    let mut seed = [0u8; 32];
    for (i, byte) in seed.iter_mut().enumerate() {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes().chain([i as u8]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        *byte = (h >> 32) as u8;
    }
    seed
}
