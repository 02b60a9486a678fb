//! Arbitrary payload text: its canonical text (what the fingerprint hashes) is the same
//! whether the fast pass or the serde writer makes it, and both agree on what is JSON
//! (`tests/it/support/oracle.rs`'s check, shared with `tests/it/prop_tools.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
#[allow(dead_code)]
#[path = "../../tests/it/support/oracle.rs"]
mod oracle;

fuzz_target!(|payload: &str| {
    if let Err(e) = oracle::check_canonical(payload) {
        panic!("{e}");
    }
});
