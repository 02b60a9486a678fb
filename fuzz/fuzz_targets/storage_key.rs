//! Arbitrary (namespace, event id) pairs: the key of a valid pair is one URL-unreserved path
//! segment and parses back to exactly that pair, so no two pairs share a key
//! (`tests/it/support/oracle.rs`'s check, shared with `tests/it/prop_tools.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
#[allow(dead_code)]
#[path = "../../tests/it/support/oracle.rs"]
mod oracle;
use event_store::key::{validate_event_id, validate_namespace};

fuzz_target!(|input: (Option<String>, String)| {
    let (ns, id) = input;
    if validate_event_id(&id).is_err() || ns.as_deref().is_some_and(|n| validate_namespace(n).is_err()) {
        return;
    }
    if let Err(e) = oracle::check_storage_key(ns.as_deref(), &id) {
        panic!("{e}");
    }
});
